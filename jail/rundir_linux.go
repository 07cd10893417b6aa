package jail

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// runDir is a run's host directory: root/ is the (empty) mount point of the
// jail's root tmpfs, work/ the fresh /work. Its name starts with the pid of
// the stockade that made it, so a later stockade can tell a crashed run's
// directory from a live one.
type runDir struct {
	path string
	root string
	work string
}

// baseDir is the per-user parent of run directories. It must be ours and
// not writable by anyone else: /tmp is shared, and a directory planted there
// by another user could redirect a run's /work.
func baseDir() (string, error) {
	base := filepath.Join(os.TempDir(), "stockade-"+strconv.Itoa(os.Getuid()))
	if err := os.Mkdir(base, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("run directory %s: %w", base, err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(base, &st); err != nil {
		return "", fmt.Errorf("run directory %s: %w", base, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Getuid() || st.Mode&0o022 != 0 {
		return "", fmt.Errorf("run directory %s: not a directory owned by uid %d and writable only by it; remove it", base, os.Getuid())
	}
	return base, nil
}

// newRunDir makes a run's directory. workOwner is the host uid and gid the
// jail user has, so that it can write its fresh /work; -1 means no /work dir.
func newRunDir(workUID, workGID int) (*runDir, error) {
	base, err := baseDir()
	if err != nil {
		return nil, err
	}
	removeStaleRunDirs(base)
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, err
	}
	d := &runDir{path: filepath.Join(base, strconv.Itoa(os.Getpid())+"-"+hex.EncodeToString(rnd[:]))}
	d.root = filepath.Join(d.path, "root")
	if err := os.Mkdir(d.path, 0o755); err != nil {
		return nil, fmt.Errorf("run directory: %w", err)
	}
	if err := os.Mkdir(d.root, 0o755); err != nil {
		d.remove()
		return nil, fmt.Errorf("run directory: %w", err)
	}
	if workUID >= 0 {
		d.work = filepath.Join(d.path, "work")
		if err := os.Mkdir(d.work, 0o700); err != nil {
			d.remove()
			return nil, fmt.Errorf("work directory: %w", err)
		}
		if err := os.Lchown(d.work, workUID, workGID); err != nil {
			d.remove()
			return nil, fmt.Errorf("work directory: %w", err)
		}
	}
	return d, nil
}

// remove deletes the run directory and whatever the jail wrote in /work.
// The jail is dead by now, so nothing races us; still, nothing is followed:
// os.RemoveAll unlinks symlinks rather than their targets. Directories the
// jailed code made unreadable are opened up first (only real directories,
// never through a link).
func (d *runDir) remove() error {
	err := os.RemoveAll(d.path)
	if err == nil {
		return nil
	}
	_ = filepath.WalkDir(d.path, func(p string, e fs.DirEntry, err error) error {
		if e != nil && e.IsDir() && e.Type()&fs.ModeSymlink == 0 {
			_ = unix.Fchmodat(unix.AT_FDCWD, p, 0o700, 0)
		}
		return nil
	})
	if err := os.RemoveAll(d.path); err != nil {
		return fmt.Errorf("remove run directory: %w", err)
	}
	return nil
}

// removeStaleRunDirs removes directories left by a stockade that died
// without cleaning up (SIGKILL): those whose pid no longer exists.
func removeStaleRunDirs(base string) {
	ents, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range ents {
		pidStr, _, ok := strings.Cut(e.Name(), "-")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if unix.Kill(pid, 0) == unix.ESRCH {
			(&runDir{path: filepath.Join(base, e.Name())}).remove()
		}
	}
}
