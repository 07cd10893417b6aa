package jail

import (
	"os"
	"runtime"
	"testing"
)

// init keeps the main goroutine on the main thread, as jailinit
// does: this binary doubles as a jail's init (see jailinit.unshareTime).
func init() { runtime.LockOSThread() }

// TestMain lets the test binary serve as a jail's init: Run re-executes
// /proc/self/exe, which here is this binary.
func TestMain(m *testing.M) {
	if IsChild() {
		ChildMain()
	}
	os.Exit(m.Run())
}
