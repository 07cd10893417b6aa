package main

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stockade/stockade/internal/testenv"
)

// TestLibraryExampleRuns builds the example as any program using the
// library would be built (no embedded init, no hook of its own) and runs
// it: a program that calls jail.Run without setting anything up must get
// its run, not "jail init ended without a report".
func TestLibraryExampleRuns(t *testing.T) {
	testenv.NeedJail(t)
	bin := filepath.Join(t.TempDir(), "library")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).CombinedOutput()
	if want := "verdict ok, exit 0, memory limit 256 MiB: 4950\n"; err != nil || string(out) != want {
		t.Fatalf("the example: %v, printed %q, want %q", err, out, want)
	}
}
