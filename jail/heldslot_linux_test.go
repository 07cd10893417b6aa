package jail

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stockade/stockade/internal/mounttest"
	"github.com/stockade/stockade/internal/runlock"
	"github.com/stockade/stockade/internal/testenv"
)

// TestAttackSweepTakesALiveRunsLeftovers: a run whose Close could not
// remove its run directory (a mount pins it) freed its run lock with the
// record kept, while the stockade that made it lived on to try again (a
// server's shutdown sweep). Another stockade's sweep, finding the slot
// free, took the live run's directory for a dead one's and met "unlink
// pin: device or resource busy" (CI, two jobs on one host). A free slot
// must mean nothing of its run is left: until the pin goes, another's
// sweep passes the slot by; then this process's Sweep removes the rest
// and frees it.
func TestAttackSweepTakesALiveRunsLeftovers(t *testing.T) {
	testenv.NeedJail(t)
	testenv.NeedRoot(t, "mounts a tmpfs in the run directory")
	lockDir := filepath.Join(t.TempDir(), "runs")
	t.Setenv(runlock.DirEnv, lockDir)
	var notices bytes.Buffer
	p, err := Prepare(context.Background(), spec("true"), Streams{Notices: &notices})
	if err != nil {
		t.Fatal(err)
	}
	runDir := p.dir.path
	pin := filepath.Join(runDir, "pin")
	t.Cleanup(func() { Sweep(nil) }) // after the pin's detach: cleanups run last first
	unpin := mounttest.Pin(t, pin)
	if err := p.Close(); err == nil {
		t.Fatalf("Close removed %s with a tmpfs mounted in it", runDir)
	}
	slots := func() (n int) {
		ents, _ := os.ReadDir(lockDir)
		for _, e := range ents {
			if _, err := strconv.Atoi(e.Name()); err == nil {
				n++
			}
		}
		return n
	}
	if slots() != 1 {
		t.Fatalf("the run's slot is gone with its run directory still there (%d slots in %s)", slots(), lockDir)
	}

	// Another stockade's sweep, as at its start.
	var taken []runlock.Stale
	var told []error
	err = runlock.Sweep(lockDir, func(s runlock.Stale) error {
		taken = append(taken, s)
		return removeLeftovers(s, nil)
	}, func(err error) { told = append(told, err) })
	if err != nil {
		t.Fatal(err)
	}
	if len(taken) > 0 {
		t.Errorf("another stockade's sweep took the slot of a live run whose directory is still mounted on: %+v; it said %v", taken, told)
	}
	if _, err := os.Lstat(pin); err != nil {
		t.Fatalf("the pin went from under the run that holds it: %v", err)
	}

	// Still there: this process's Sweep says so and keeps the slot.
	if err := Sweep(nil); err == nil {
		t.Errorf("Sweep with %s still mounted: no error", pin)
	}
	if slots() != 1 {
		t.Errorf("the slot was freed by a Sweep that could not remove %s", runDir)
	}
	if err := unpin(); err != nil {
		t.Fatal(err)
	}
	if err := Sweep(nil); err != nil {
		t.Errorf("Sweep once the pin is gone: %v", err)
	}
	if _, err := os.Lstat(runDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the run directory %s after the Sweep: %v, want it gone", runDir, err)
	}
	if n := slots(); n != 0 {
		t.Errorf("%d slots left in %s after everything of the run was removed", n, lockDir)
	}
	t.Logf("notices: %s", notices.String())
}
