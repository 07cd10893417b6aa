package runlock

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

func lockDir(t *testing.T) string {
	return filepath.Join(t.TempDir(), "stockade", "runs")
}

func mustAcquire(t *testing.T, dir string, clean func(Stale) error) *Lock {
	t.Helper()
	l, err := Acquire(dir, clean, func(err error) { t.Errorf("notice: %v", err) })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func noClean(t *testing.T) func(Stale) error {
	return func(s Stale) error {
		t.Errorf("clean called for slot %d (%v) while its owner lives", s.Slot, s.Entries)
		return nil
	}
}

// Runs that hold slots at once get distinct slots, lowest first, and a
// released slot is handed out again.
func TestConcurrentRunsGetDistinctSlots(t *testing.T) {
	dir := lockDir(t)
	var held []*Lock
	for i := range 5 {
		l := mustAcquire(t, dir, noClean(t))
		if l.Slot() != i {
			t.Errorf("run %d got slot %d, want %d", i, l.Slot(), i)
		}
		held = append(held, l)
	}
	if err := held[2].Release(); err != nil {
		t.Fatal(err)
	}
	if l := mustAcquire(t, dir, noClean(t)); l.Slot() != 2 {
		t.Errorf("after releasing slot 2, got %d", l.Slot())
	}
	if _, err := os.Stat(held[2].Path()); err != nil {
		t.Errorf("slot 2 was released but is not held again: %v", err)
	}
}

// TestAttackDeadOwnerLeftovers plays a SIGKILLed stockade: its lock drops
// with its file descriptor, and the next Acquire hands exactly its record to
// the cleaner, frees the slot only once the cleaner succeeded, and never
// touches a live slot.
func TestAttackDeadOwnerLeftovers(t *testing.T) {
	dir := lockDir(t)
	live := mustAcquire(t, dir, noClean(t))
	if err := live.Record("cgroup", "/sys/fs/cgroup/pids/stockade.live"); err != nil {
		t.Fatal(err)
	}
	dead := mustAcquire(t, dir, noClean(t))
	want := []Entry{{"rundir", "/tmp/stockade-0/r1-x"}, {"cgroup", "/sys/fs/cgroup/cpu/stockade.r1-x"}}
	for _, e := range want {
		if err := dead.Record(e.Kind, e.Path); err != nil {
			t.Fatal(err)
		}
	}
	dead.Abandon() // what the kernel does for a SIGKILLed owner

	var got []Stale
	failing := func(s Stale) error { got = append(got, s); return errors.New("busy") }
	var notices []error
	l, err := Acquire(dir, failing, func(err error) { notices = append(notices, err) })
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Slot != dead.Slot() || !slices.Equal(got[0].Entries, want) {
		t.Fatalf("cleaner got %+v, want slot %d with %v", got, dead.Slot(), want)
	}
	if len(notices) != 1 {
		t.Errorf("a failed clean gave notices %v, want one", notices)
	}
	if l.Slot() == dead.Slot() || l.Slot() == live.Slot() {
		t.Errorf("got slot %d, which is not free", l.Slot())
	}
	got = nil
	ok := func(s Stale) error { got = append(got, s); return nil }
	l2 := mustAcquire(t, dir, ok)
	if len(got) != 1 || got[0].Slot != dead.Slot() {
		t.Fatalf("second sweep cleaned %+v, want the dead slot again", got)
	}
	if l2.Slot() != dead.Slot() {
		t.Errorf("the cleaned slot %d was not reused (got %d)", dead.Slot(), l2.Slot())
	}
	if err := l2.Release(); err != nil {
		t.Fatal(err)
	}
	got = nil
	mustAcquire(t, dir, ok)
	if len(got) != 0 {
		t.Errorf("a released (clean) slot was swept: %+v", got)
	}
}

// A record cut by a crash mid-write names nothing that was created; a
// record that is not ours to parse stops the sweep of that slot.
func TestRecordCutByCrash(t *testing.T) {
	dir := lockDir(t)
	l := mustAcquire(t, dir, noClean(t))
	l.Record("rundir", "/tmp/a")
	f, err := os.OpenFile(l.Path(), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("cgroup\t/sys/fs/cgroup/cpu/stockade.hal")
	f.Close()
	l.Abandon()
	var got []Stale
	mustAcquire(t, dir, func(s Stale) error { got = append(got, s); return nil })
	if len(got) != 1 || !slices.Equal(got[0].Entries, []Entry{{"rundir", "/tmp/a"}}) {
		t.Errorf("got %+v", got)
	}
}

func TestRecordRefusesBadEntries(t *testing.T) {
	l := mustAcquire(t, lockDir(t), noClean(t))
	for _, e := range []Entry{{"", "/a"}, {"k", "rel"}, {"k", "/a/../b"}, {"k\tx", "/a"}, {"k", "/a\n/b"}} {
		if err := l.Record(e.Kind, e.Path); err == nil {
			t.Errorf("Record(%q, %q) accepted", e.Kind, e.Path)
		}
	}
}

// TestAttackPlantedLockDir: a lock directory another user can write would
// let them plant records that the next sweep removes as root.
func TestAttackPlantedLockDir(t *testing.T) {
	dir := lockDir(t)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o777)
	if _, err := Acquire(dir, noClean(t), nil); err == nil {
		t.Error("Acquire accepted a world-writable lock directory")
	}
	os.Chmod(dir, 0o700)
	os.Remove(dir)
	os.Symlink(t.TempDir(), dir)
	if _, err := Acquire(dir, noClean(t), nil); err == nil {
		t.Error("Acquire accepted a symlinked lock directory")
	}
}

func TestSlotNames(t *testing.T) {
	for _, n := range []string{"0", "7", strconv.Itoa(MaxSlots - 1)} {
		if _, ok := parseSlot(n); !ok {
			t.Errorf("%s refused", n)
		}
	}
	for _, n := range []string{"-1", "007", "x", strconv.Itoa(MaxSlots), ".tmp", ""} {
		if _, ok := parseSlot(n); ok {
			t.Errorf("%q accepted", n)
		}
	}
}
