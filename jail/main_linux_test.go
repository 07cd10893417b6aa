package jail

import (
	"os"
	"testing"
)

// TestMain lets the test binary serve as a jail's init: Run re-executes
// /proc/self/exe, which here is this binary.
func TestMain(m *testing.M) {
	if IsChild() {
		ChildMain()
	}
	os.Exit(m.Run())
}
