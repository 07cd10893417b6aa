package jail

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/stockade/stockade/internal/runlock"
	"golang.org/x/sys/unix"
)

// fallbackBase is a run's private base in the temp directory, for a user
// whose usual lock directory or run base is not theirs (another user made
// $TMPDIR/stockade-<uid> first): refusing to run would let any local user
// stop every run of ours. It holds the run's lock directory (runs/) and its
// run directory, and goes with the run. The run holds an flock on the
// directory itself for its whole life: a run killed with SIGKILL cannot
// remove its base, and the lock, which the kernel drops with the dead
// process's descriptor, is how the next run tells such a base from a live
// one and sweeps it (sweepFallbacks).
type fallbackBase struct {
	path string
	fd   int
}

// fallbackPrefix starts the name of every fallback base: the name of the
// usual base in the temp directory, and a dot.
func fallbackPrefix() string { return filepath.Base(runlock.TempUserDir()) + "." }

func isFallbackBase(dir string) bool {
	return filepath.Dir(dir) == filepath.Clean(os.TempDir()) && isFallbackName(filepath.Base(dir))
}

// isFallbackName reports whether name is one os.MkdirTemp makes from
// fallbackPrefix: the prefix and its random suffix, the decimal digits of
// a uint32. Nothing looser: the sweep removes what matches, and
// "stockade-1000.old" is the user's own (an mv of the usual base).
func isFallbackName(name string) bool {
	suffix, ok := strings.CutPrefix(name, fallbackPrefix())
	if !ok || len(suffix) == 0 || len(suffix) > len("4294967295") {
		return false
	}
	return strings.Trim(suffix, "0123456789") == ""
}

// newFallback makes and locks a fallback base. 0711: init reaches the run
// directory in it as the jail user. Between the mkdir and the flock another
// run's sweep may take the still unlocked, empty directory for a dead run's
// and remove it; the lock is then on a directory that has no name any more,
// and a new one is made.
func newFallback() (*fallbackBase, error) {
	for range 8 {
		path, err := os.MkdirTemp(os.TempDir(), fallbackPrefix())
		if err != nil {
			return nil, fmt.Errorf("a private run directory base: %w", err)
		}
		fd, err := lockedDir(path, unix.LOCK_EX)
		if err != nil {
			os.Remove(path)
			return nil, fmt.Errorf("a private run directory base %s: %w", path, err)
		}
		if fd < 0 {
			continue // swept meanwhile
		}
		if err := unix.Fchmod(fd, 0o711); err != nil {
			unix.Close(fd)
			removeTree(path)
			return nil, fmt.Errorf("a private run directory base %s: %w", path, err)
		}
		return &fallbackBase{path: path, fd: fd}, nil
	}
	return nil, errors.New("a private run directory base: each one made was removed before it could be locked")
}

// remove deletes the base with everything in it and drops its lock, in
// that order: a sweep never sees it unlocked while it exists.
func (f *fallbackBase) remove() error {
	err := removeTree(f.path)
	unix.Close(f.fd)
	return err
}

// lockedDir opens the directory path (not through a symlink) and flocks it
// with how. It returns -1 and no error when the lock is held by another
// (how with LOCK_NB), or when path no longer names the directory that was
// locked (removed meanwhile by the lock's previous holder).
func lockedDir(path string, how int) (int, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	for {
		err = unix.Flock(fd, how)
		if err != unix.EINTR {
			break
		}
	}
	if errors.Is(err, unix.EWOULDBLOCK) {
		unix.Close(fd)
		return -1, nil
	}
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("flock: %w", err)
	}
	var held, named unix.Stat_t
	if unix.Fstat(fd, &held) != nil || unix.Lstat(path, &named) != nil || held.Dev != named.Dev || held.Ino != named.Ino {
		unix.Close(fd)
		return -1, nil
	}
	return fd, nil
}

// sweepFallbacks removes the fallback bases of this user's runs that are
// gone (killed with SIGKILL, or cut short before they could remove them),
// as Acquire sweeps a lock directory: what their lock directory records is
// killed and removed first (clean), then the base. A base whose lock is
// held is a live run's and is not touched; one that is not this user's, or
// that others can write, is not ours to judge. Failures go to say, and the
// base then waits for a later run.
func sweepFallbacks(clean func(runlock.Stale) error, say func(error)) {
	names, err := filepath.Glob(filepath.Join(os.TempDir(), fallbackPrefix()+"*"))
	if err != nil {
		return
	}
	for _, path := range names {
		if !isFallbackName(filepath.Base(path)) {
			continue
		}
		if err := sweepFallback(path, clean, say); err != nil {
			say(fmt.Errorf("private run directory base %s of a stockade that died: %w", path, err))
		}
	}
}

func sweepFallback(path string, clean func(runlock.Stale) error, say func(error)) error {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil || !runlock.OwnedOnly(&st, unix.S_IFDIR) {
		return nil
	}
	fd, err := lockedDir(path, unix.LOCK_EX|unix.LOCK_NB)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil // removed meanwhile by another run's sweep
		}
		return err
	}
	if fd < 0 {
		return nil
	}
	f := &fallbackBase{path: path, fd: fd}
	failed := false
	err = runlock.Sweep(filepath.Join(path, "runs"), func(s runlock.Stale) error {
		err := clean(s)
		failed = failed || err != nil
		return err
	}, say)
	if err != nil || failed {
		// The records stay, naming what is left, for the next sweep.
		unix.Close(fd)
		return err
	}
	return f.remove()
}
