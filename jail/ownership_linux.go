package jail

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/stockade/stockade/cgroup"
	"github.com/stockade/stockade/internal/runlock"
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
	// id is the host-wide number behind the jail's host uid (root only;
	// nil otherwise). It is not the slot: a slot is unique only within
	// one lock directory, and stockades with lock directories of their own
	// share the host's uids.
	id *runlock.ID
	// leftovers is set when removing something recorded failed; the slot
	// then keeps its record for the next stockade's sweep.
	leftovers bool
	// fallback is the run's private lock directory's parent and run base
	// (see acquireOwnership), nil normally; removed on release.
	fallback *fallbackBase
}

// acquireOwnership sweeps the leftovers of dead stockades and takes a slot.
// A user other than root whose lock directory or run base is another's
// (made first by someone else in the shared temp directory) runs from a
// private fallback instead, with a notice; the user's next run sweeps it
// should this one be killed with SIGKILL.
func acquireOwnership(notices io.Writer) (*ownership, error) {
	say := func(err error) {
		if notices != nil {
			fmt.Fprintf(notices, "stockade: %v\n", err)
		}
	}
	if err := retryHeld(notices); err != nil {
		say(err)
	}
	clean := func(s runlock.Stale) error { return removeLeftovers(s, notices) }
	hostRoot := runlock.HostRoot()
	if !hostRoot {
		sweepFallbacks(clean, say)
	}
	l, err := runlock.Acquire(runlock.DefaultDir(), clean, say)
	o := &ownership{}
	if err == nil && !hostRoot {
		if berr := ensureBase(RunBase()); berr != nil {
			l.Release()
			l, err = nil, berr
		}
	}
	if err != nil && !hostRoot && os.Getenv(runlock.DirEnv) == "" {
		fb, ferr := newFallback()
		if ferr != nil {
			return nil, fmt.Errorf("%w; %w", err, ferr)
		}
		say(fmt.Errorf("%v; running from the private %s instead (it goes with the run; if what is in the way is another user's, ask them or root to remove it)", err, fb.path))
		if l, err = runlock.Acquire(filepath.Join(fb.path, "runs"), clean, say); err != nil {
			fb.remove()
			return nil, err
		}
		o.fallback = fb
	}
	if err != nil {
		return nil, err
	}
	o.lock = l
	if os.Geteuid() == 0 {
		if o.id, err = runlock.AcquireID(runlock.IDsDir(), l.Slot()); err != nil {
			o.release(notices)
			return nil, err
		}
	}
	return o, nil
}

// hostIDNum is the number HostIDFor makes the jail's host uid from.
func (o *ownership) hostIDNum() int {
	if o.id == nil {
		return o.lock.Slot() // not root: the jail is stockade's own uid anyway
	}
	return o.id.N()
}

// release frees the slot, or, if something of the run could not be
// removed, keeps it held with its record (hold) until a later try removes
// everything (retryHeld) or this process dies.
func (o *ownership) release(notices io.Writer) {
	// The jail is dead by now (init is reaped; its pid namespace went with
	// it), so nothing runs as the uid any more.
	if o.id != nil {
		o.id.Release()
		o.id = nil
	}
	if o.leftovers {
		// A run that failed part-way (a cgroup half made) or whose Close
		// could not remove something: what its record names is dead and
		// ours, and one more try now leaves nothing for later when it
		// works.
		o.retry()
	}
	if o.leftovers {
		o.hold()
		return
	}
	o.free(notices)
}

// retry removes what the slot records once more; leftovers says whether
// something is still there.
func (o *ownership) retry() error {
	ents, err := o.lock.Entries()
	if err == nil {
		_, _, err = removeRecorded(ents)
	}
	o.leftovers = err != nil
	return err
}

// free releases the slot, which must record nothing left, and the run's
// private fallback base.
func (o *ownership) free(notices io.Writer) {
	if err := o.lock.Release(); err != nil && notices != nil {
		fmt.Fprintf(notices, "stockade: %v\n", err)
	}
	if o.fallback != nil {
		if err := o.fallback.remove(); err != nil && notices != nil {
			fmt.Fprintf(notices, "stockade: remove %s: %v\n", o.fallback.path, err)
		}
	}
}

// heldRuns are this process's runs whose Close left something behind: their
// slots stay locked until retryHeld removes what they record. A free slot
// tells every other stockade's sweep that its owner is dead and what it
// records is for the taking; a slot freed with a mount still in its run
// directory sent another stockade's sweep after a directory this one was
// about to remove again (CI saw "unlink pin: device or resource busy"
// when two jobs shared a host). It is per process, as the locks are: they
// go with it when it dies, and only then is what they record a dead run's.
var heldRuns struct {
	sync.Mutex
	runs []*ownership
}

// hold keeps o's slot, record and all, for retryHeld.
func (o *ownership) hold() {
	heldRuns.Lock()
	defer heldRuns.Unlock()
	heldRuns.runs = append(heldRuns.runs, o)
}

// retryHeld removes again what this process's held slots record, freeing
// each slot that then records nothing left. It returns what is still
// there.
func retryHeld(notices io.Writer) error {
	heldRuns.Lock()
	defer heldRuns.Unlock()
	var errs []error
	kept := heldRuns.runs[:0]
	for _, o := range heldRuns.runs {
		if err := o.retry(); err != nil {
			errs = append(errs, fmt.Errorf("leftovers of a run of this stockade (run lock %s): %w", o.lock.Path(), err))
			kept = append(kept, o)
			continue
		}
		o.free(notices)
	}
	clear(heldRuns.runs[len(kept):])
	heldRuns.runs = kept
	return errors.Join(errs...)
}

// HostIDFor is the host uid and gid of the jail user for the run holding
// number n (runlock.AcquireID, one host-wide allocator whatever the lock
// directory), when stockade runs as root, and of a VM run's QEMU (vmtier's
// VMM jail takes a number of its own): one per concurrent run, so that the
// kernel's per-user allowances (pipe buffer pages, POSIX message queue
// bytes, inotify watches, keys) are not shared between jails, and one jail
// exhausting its own cannot starve another. A slot, and with it the id, is
// handed out again only after its previous run's init is reaped (and with
// it every process of the jail: init is pid 1 of the jail's pid namespace,
// and dies with a stockade that is SIGKILLed, through Pdeathsig).
// HostID itself is left out: every jail of an older stockade was HostID.
//
// This is the one place a run's host id is chosen from its slot; a mapping
// that must follow the caller's own uid_map (stockade inside a user
// namespace) belongs here too.
func HostIDFor(n int) int {
	return HostID + 1 + n
}

// Sweep removes what dead runs left behind, as every run's start does:
// the cgroups and run directories recorded in the run lock slots of
// stockades that are gone, and those a run of this process left when its
// Close could not remove them (Close's error said so; their slots stay
// held until then, see heldRuns). A long-lived caller (stockade serve) calls
// it before it exits, when a Close failed, rather than leave them to the
// next stockade's start. The error lists what is still there of this
// process's runs; what another's sweep could not remove is a notice, as
// at a run's start.
func Sweep(notices io.Writer) error {
	heldErr := retryHeld(notices)
	mine := fmt.Sprintf("-%d-", os.Getpid())
	var own []error
	clean := func(s runlock.Stale) error {
		err := removeLeftovers(s, notices)
		if err != nil && ranHere(s, mine) {
			own = append(own, err)
		}
		return err
	}
	notice := func(err error) {
		for _, o := range own {
			if errors.Is(err, o) {
				return // returned, not told each time round
			}
		}
		if notices != nil {
			fmt.Fprintf(notices, "stockade: %v\n", err)
		}
	}
	if err := runlock.Sweep(runlock.DefaultDir(), clean, notice); err != nil {
		return errors.Join(heldErr, err)
	}
	return errors.Join(append([]error{heldErr}, own...)...)
}

// ranHere reports whether a slot's record names a run directory made by
// this process (named r<slot>-<pid>-<random>, see newRunDir). A dead
// stockade's run with the same pid would be matched too; such a run is
// long gone, and its leftovers are as much to remove.
func ranHere(s runlock.Stale, mine string) bool {
	for _, e := range s.Entries {
		if e.Kind == recordRunDir && strings.Contains(filepath.Base(e.Path), mine) {
			return true
		}
	}
	return false
}

// removeLeftovers kills and removes what a dead stockade's slot recorded
// (removeRecorded), and says what it removed.
func removeLeftovers(s runlock.Stale, notices io.Writer) error {
	gone, killed, err := removeRecorded(s.Entries)
	if err != nil {
		return err
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

// removeRecorded kills and removes what a slot's record names: its cgroup
// first (whose processes could still be writing), then its run directory
// with the /work data. It returns what was there to remove and how many
// processes it killed.
func removeRecorded(entries []runlock.Entry) (gone []string, killed int, err error) {
	var groups, runDirs []string
	for _, e := range entries {
		switch e.Kind {
		case recordCgroup:
			groups = append(groups, e.Path)
		case recordRunDir:
			runDirs = append(runDirs, e.Path)
		default:
			return nil, 0, fmt.Errorf("unknown record kind %q for %s", e.Kind, e.Path)
		}
	}
	for _, g := range groups {
		if _, err := os.Lstat(g); err == nil {
			gone = append(gone, "cgroup "+g)
		}
	}
	if killed, err = cgroup.RemoveStale(groups); err != nil {
		return nil, 0, err
	}
	for _, d := range runDirs {
		if _, err := os.Lstat(d); errors.Is(err, os.ErrNotExist) {
			continue
		}
		if !ownRunDirPath(d) {
			return nil, 0, fmt.Errorf("run directory %s is not in %s (nor in a private fallback base of ours)", d, RunBase())
		}
		if err := (&runDir{path: d}).remove(); err != nil {
			return nil, 0, err
		}
		gone = append(gone, "run directory "+d)
	}
	return gone, killed, nil
}
