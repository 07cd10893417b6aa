package runlock

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// MaxSlots bounds how many runs may hold a slot at once on one host.
const MaxSlots = 1 << 16

// maxRecord bounds what a sweep reads of a slot file; a record is a few
// paths.
const maxRecord = 64 << 10

// Entry is one thing a run created on the host, as recorded in its slot.
type Entry struct {
	Kind string // what it is, for the sweeper: "rundir", "cgroup"
	Path string // absolute host path
}

// Lock is one run's slot, held until Release or Abandon.
type Lock struct {
	dir  string
	slot int
	fd   int
	size int64
}

// DirEnv names the environment variable that overrides DefaultDir. Every
// stockade that shares cgroup parents should share the directory; one with
// a directory of its own never removes, and never has removed, another's
// leftovers (tests use that to keep the host's other stockades off theirs).
const DirEnv = "STOCKADE_LOCK_DIR"

// DefaultDir is the lock directory for this stockade: $STOCKADE_LOCK_DIR
// if set, else /run/stockade/runs for HostRoot (emptied on reboot together
// with every cgroup where /run is a tmpfs, and not private to a systemd
// service with PrivateTmp=, as /tmp is), and runs/ in UserDir for anyone
// else (whose cgroups, if any, are delegated to them alone).
func DefaultDir() string {
	if d := os.Getenv(DirEnv); filepath.IsAbs(d) {
		return filepath.Clean(d)
	}
	if HostRoot() {
		return "/run/stockade/runs"
	}
	return filepath.Join(UserDir(), "runs")
}

// Stale is a slot whose owner is gone, handed to the cleaner with its lock
// held, so no other stockade can start on the same leftovers.
type Stale struct {
	Slot    int
	Entries []Entry
}

// Acquire removes what dead stockades left (clean is called once per stale
// slot, with its lock held; the slot is freed only if clean succeeds) and
// then takes the lowest free slot. Errors from clean do not fail the run:
// they are passed to notice and the leftovers wait for the next start.
func Acquire(dir string, clean func(Stale) error, notice func(error)) (*Lock, error) {
	if err := ensureDir(dir); err != nil {
		return nil, err
	}
	taken, err := sweep(dir, clean, notice)
	if err != nil {
		return nil, err
	}
	return take(dir, taken)
}

// Sweep cleans every stale slot in dir, as Acquire does, without taking
// one: for a stockade that gave up a slot's record (Abandon) when it could
// not remove what it lists, and tries again before it exits. Errors go to
// notice, as Acquire's do; a missing dir holds nothing to sweep.
func Sweep(dir string, clean func(Stale) error, notice func(error)) error {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := ensureDir(dir); err != nil {
		return err
	}
	_, err := sweep(dir, clean, notice)
	return err
}

// sweep cleans every stale slot in dir and returns the slots that are live
// (or were, a moment ago).
func sweep(dir string, clean func(Stale) error, notice func(error)) (map[int]bool, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("run locks: read %s: %w", dir, err)
	}
	taken := map[int]bool{}
	for _, e := range ents {
		slot, ok := parseSlot(e.Name())
		if !ok {
			continue
		}
		live, err := sweepOne(dir, slot, clean)
		if err != nil && notice != nil {
			notice(err)
		}
		if live || err != nil {
			taken[slot] = true
		}
	}
	return taken, nil
}

func parseSlot(name string) (int, bool) {
	n, err := strconv.Atoi(name)
	if err != nil || n < 0 || n >= MaxSlots || strconv.Itoa(n) != name {
		return 0, false
	}
	return n, true
}

// sweepOne cleans slot if its owner is gone. live reports a held lock.
func sweepOne(dir string, slot int, clean func(Stale) error) (live bool, err error) {
	path := filepath.Join(dir, strconv.Itoa(slot))
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return false, nil // released meanwhile
	}
	if err != nil {
		return false, fmt.Errorf("run lock %s: open: %w", path, err)
	}
	defer unix.Close(fd)
	if err := flock(fd, unix.LOCK_EX|unix.LOCK_NB); errors.Is(err, unix.EWOULDBLOCK) {
		return true, nil
	} else if err != nil {
		return false, fmt.Errorf("run lock %s: flock: %w", path, err)
	}
	// The owner unlinks its slot, then closes it; we may have opened it
	// just before the unlink and locked it just after the close. An
	// unlinked slot is not a leftover, and its name may already be a new
	// run's file.
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, fmt.Errorf("run lock %s: fstat: %w", path, err)
	}
	if st.Nlink == 0 {
		return false, nil
	}
	entries, err := readRecord(fd)
	if err != nil {
		return false, fmt.Errorf("run lock %s: %w", path, err)
	}
	if len(entries) > 0 {
		if err := clean(Stale{Slot: slot, Entries: entries}); err != nil {
			return false, fmt.Errorf("leftovers of a dead stockade (run lock %s): %w", path, err)
		}
	}
	// Unlinked under our lock: nobody else can hold this inode, and a new
	// run can link a fresh slot file at this name only once it is gone.
	if err := unix.Unlink(path); err != nil && !errors.Is(err, unix.ENOENT) {
		return false, fmt.Errorf("run lock %s: unlink: %w", path, err)
	}
	return false, nil
}

func readRecord(fd int) ([]Entry, error) {
	buf := make([]byte, maxRecord)
	n := 0
	for n < len(buf) {
		m, err := unix.Pread(fd, buf[n:], int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read record: %w", err)
		}
		if m == 0 {
			break
		}
		n += m
	}
	var out []Entry
	for line := range bytes.Lines(buf[:n]) {
		// A line without its newline was cut by the crash that left it;
		// the thing it names was not created yet.
		if !bytes.HasSuffix(line, []byte("\n")) {
			break
		}
		kind, path, ok := strings.Cut(strings.TrimSuffix(string(line), "\n"), "\t")
		if !ok || kind == "" || !filepath.IsAbs(path) || filepath.Clean(path) != path {
			return nil, fmt.Errorf("record line %q is not \"kind<TAB>absolute path\"", line)
		}
		out = append(out, Entry{Kind: kind, Path: path})
	}
	return out, nil
}

// take links a fresh, already locked slot file at the lowest free number.
// The file is made with O_TMPFILE and locked before it gets a name, so no
// sweeper can ever see a slot file that is not locked by a live owner.
func take(dir string, taken map[int]bool) (*Lock, error) {
	fd, err := unix.Open(dir, unix.O_RDWR|unix.O_TMPFILE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("run locks: create an unnamed file in %s (O_TMPFILE; the lock directory must be on tmpfs, ext4, xfs or btrfs): %w", dir, err)
	}
	if err := flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("run locks: flock a new slot in %s: %w", dir, err)
	}
	for slot := range MaxSlots {
		if taken[slot] {
			continue
		}
		err := linkFD(fd, filepath.Join(dir, strconv.Itoa(slot)))
		if errors.Is(err, unix.EEXIST) {
			continue // taken since we listed, or a leftover a sweep could not clean
		}
		if err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("run locks: %w", err)
		}
		return &Lock{dir: dir, slot: slot, fd: fd}, nil
	}
	unix.Close(fd)
	return nil, fmt.Errorf("run locks: all %d slots in %s are taken (%d live runs)", MaxSlots, dir, len(taken))
}

// linkFD gives the O_TMPFILE file fd the name path. AT_EMPTY_PATH needs
// CAP_DAC_READ_SEARCH; /proc/self/fd works for anyone who can see /proc.
func linkFD(fd int, path string) error {
	err := unix.Linkat(fd, "", unix.AT_FDCWD, path, unix.AT_EMPTY_PATH)
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOENT) {
		err = unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), unix.AT_FDCWD, path, unix.AT_SYMLINK_FOLLOW)
	}
	if err != nil {
		return fmt.Errorf("link slot %s: %w", path, err)
	}
	return nil
}

// ensureDir makes dir (and its parent) if needed and checks that it is a
// real directory owned by us and writable by nobody else: its records name
// paths that a sweep kills and removes, so nobody else may write them.
func ensureDir(dir string) error {
	if err := EnsureOwnedDir(dir, 0o700, 0); err != nil {
		return fmt.Errorf("run locks: %w", err)
	}
	return nil
}

// EnsureOwnedDir makes dir and its parent with mode where they are missing
// and checks that both are real directories owned by the effective uid and
// writable by nobody else, adding the permission bits need where they lack
// them. Those two levels are the caller's to trust: one planted by another
// user could redirect or rewrite what the caller keeps in it. Above them it
// makes what is missing as any directory would be (a bare system without
// /run, a fresh XDG_RUNTIME_DIR), 0755, not trusting it.
// OwnedOnly reports whether st (from Lstat) is of file type typ
// (unix.S_IFDIR, unix.S_IFREG), owned by this process's effective uid and
// writable by nobody else: what stockade requires of a directory or file
// whose contents it then believes.
func OwnedOnly(st *unix.Stat_t, typ uint32) bool {
	return st.Mode&unix.S_IFMT == typ && int(st.Uid) == os.Geteuid() && st.Mode&0o022 == 0
}

func EnsureOwnedDir(dir string, mode, need uint32) error {
	if err := os.MkdirAll(filepath.Dir(filepath.Dir(dir)), 0o755); err != nil {
		return err
	}
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := unix.Mkdir(d, mode); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("mkdir %s: %w", d, err)
		}
		var st unix.Stat_t
		if err := unix.Lstat(d, &st); err != nil {
			return fmt.Errorf("lstat %s: %w", d, err)
		}
		if !OwnedOnly(&st, unix.S_IFDIR) {
			// Not "remove it": it may be another stockade's, holding
			// live runs' locks (host root's /run/stockade, seen from
			// a user namespace), or another user's, which is not ours
			// to remove anyway.
			if st.Mode&unix.S_IFMT != unix.S_IFDIR {
				return fmt.Errorf("%s is not a directory", d)
			}
			return fmt.Errorf("%s is not a directory of uid %d writable only by it (owner uid %d, mode %04o)", d, os.Geteuid(), st.Uid, st.Mode&0o7777)
		}
		if st.Mode&need != need {
			if err := unix.Chmod(d, st.Mode&0o7777|need); err != nil {
				return fmt.Errorf("chmod %s: %w", d, err)
			}
		}
	}
	return nil
}

// Slot is the slot number, unique among the runs that hold one at once.
func (l *Lock) Slot() int { return l.slot }

// Path is the slot file.
func (l *Lock) Path() string { return filepath.Join(l.dir, strconv.Itoa(l.slot)) }

// Record adds an entry. Call it before creating the thing: a crash between
// the two leaves an entry for something absent, which the sweep skips,
// where the other order would leave something nobody knows of.
func (l *Lock) Record(kind, path string) error {
	if l.fd < 0 {
		return errors.New("run lock: record after release")
	}
	if kind == "" || strings.ContainsAny(kind, "\t\n") || strings.Contains(path, "\n") ||
		!filepath.IsAbs(path) || filepath.Clean(path) != path {
		return fmt.Errorf("run lock: cannot record %q %q", kind, path)
	}
	line := []byte(kind + "\t" + path + "\n")
	if l.size+int64(len(line)) > maxRecord {
		return fmt.Errorf("run lock %s: record full", l.Path())
	}
	for len(line) > 0 {
		n, err := unix.Pwrite(l.fd, line, l.size)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("run lock %s: write record: %w", l.Path(), err)
		}
		line, l.size = line[n:], l.size+int64(n)
	}
	return nil
}

// Entries reads back what the slot records.
func (l *Lock) Entries() ([]Entry, error) {
	if l.fd < 0 {
		return nil, errors.New("run lock: read after release")
	}
	ents, err := readRecord(l.fd)
	if err != nil {
		return nil, fmt.Errorf("run lock %s: %w", l.Path(), err)
	}
	return ents, nil
}

// Release frees the slot once everything recorded is gone. The name goes
// before the lock: a sweeper that opened the file meanwhile finds it
// unlinked and leaves it.
func (l *Lock) Release() error {
	if l.fd < 0 {
		return nil
	}
	err := unix.Unlink(l.Path())
	unix.Close(l.fd)
	l.fd = -1
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("run lock %s: unlink: %w", l.Path(), err)
	}
	return nil
}

// Abandon drops the lock but keeps the record, for when removing what it
// lists failed: the next stockade's sweep tries again.
func (l *Lock) Abandon() {
	if l.fd >= 0 {
		unix.Close(l.fd)
		l.fd = -1
	}
}

func flock(fd, how int) error {
	for {
		err := unix.Flock(fd, how)
		if err != unix.EINTR {
			return err
		}
	}
}
