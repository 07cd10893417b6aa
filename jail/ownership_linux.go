package jail

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/stockade/stockade/cgroup"
	"github.com/stockade/stockade/runlock"
)

// What a run records in its runlock slot, before creating it.
const (
	recordRunDir = "rundir"
	recordCgroup = "cgroup"
)

// ownership is a run's proof, for every other stockade on the host, that
// what it created is in use: a runlock slot held for the whole run. The
// lock is one flock in one host-wide directory rather than a lock in every
// cgroup hierarchy's group directory: a directory lock can only be taken
// after the mkdir, and in that gap another stockade's sweep sees an
// unlocked group; and a group found in one hierarchy says nothing about
// where its siblings, its run directory and its /work are. The slot names
// them all, and it is written before any of them exists.
type ownership struct {
	lock *runlock.Lock
	// leftovers is set when removing something recorded failed; the slot
	// then keeps its record for the next stockade's sweep.
	leftovers bool
}

// acquireOwnership sweeps the leftovers of dead stockades and takes a slot.
func acquireOwnership(notices io.Writer) (*ownership, error) {
	say := func(err error) {
		if notices != nil {
			fmt.Fprintf(notices, "stockade: %v\n", err)
		}
	}
	l, err := runlock.Acquire(runlock.DefaultDir(), func(s runlock.Stale) error {
		return removeLeftovers(s, notices)
	}, say)
	if err != nil {
		return nil, err
	}
	return &ownership{lock: l}, nil
}

// release frees the slot, or leaves its record for the next sweep if
// something of the run could not be removed.
func (o *ownership) release(notices io.Writer) {
	if o.leftovers {
		o.lock.Abandon()
		return
	}
	if err := o.lock.Release(); err != nil && notices != nil {
		fmt.Fprintf(notices, "stockade: %v\n", err)
	}
}

// hostIDFor is the host uid and gid of the jail user for the run holding
// slot, when stockade runs as root: one per concurrent run, so that the
// kernel's per-user allowances (pipe buffer pages, POSIX message queue
// bytes, inotify watches, keys) are not shared between jails, and one jail
// exhausting its own cannot starve another. A slot, and with it the id, is
// handed out again only after everything of its previous run is dead.
// HostID itself is left out: every jail of an older stockade was HostID.
//
// This is the one place a run's host id is chosen from its slot; a mapping
// that must follow the caller's own uid_map (stockade inside a user
// namespace) belongs here too.
func hostIDFor(slot int) int {
	return HostID + 1 + slot
}

// removeLeftovers kills and removes what a dead stockade's slot recorded:
// its cgroup first (whose processes could still be writing), then its run
// directory with the /work data.
func removeLeftovers(s runlock.Stale, notices io.Writer) error {
	var groups, gone []string
	var runDirs []string
	for _, e := range s.Entries {
		switch e.Kind {
		case recordCgroup:
			groups = append(groups, e.Path)
		case recordRunDir:
			runDirs = append(runDirs, e.Path)
		default:
			return fmt.Errorf("unknown record kind %q for %s", e.Kind, e.Path)
		}
	}
	for _, g := range groups {
		if _, err := os.Lstat(g); err == nil {
			gone = append(gone, "cgroup "+g)
		}
	}
	killed, err := cgroup.RemoveStale(groups)
	if err != nil {
		return err
	}
	base, err := baseDir()
	if err != nil {
		return err
	}
	for _, d := range runDirs {
		if filepath.Dir(d) != base || !strings.HasPrefix(filepath.Base(d), runDirPrefix) {
			return fmt.Errorf("run directory %s is not in %s", d, base)
		}
		if _, err := os.Lstat(d); errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err := (&runDir{path: d}).remove(); err != nil {
			return err
		}
		gone = append(gone, "run directory "+d)
	}
	if len(gone) > 0 && notices != nil {
		what := strings.Join(gone, ", ")
		if killed > 0 {
			what += fmt.Sprintf(" (killed %d processes still in it)", killed)
		}
		fmt.Fprintf(notices, "stockade: removed the leftovers of a stockade that died (its run lock, slot %d, was free): %s\n", s.Slot, what)
	}
	return nil
}
