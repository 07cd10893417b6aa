package cgroup

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"

	"github.com/stockade/stockade/internal/runlock"
	"golang.org/x/sys/unix"
)

// lockParent takes how (LOCK_SH while a Manager uses the v2 parent,
// LOCK_EX|LOCK_NB to undo its leaf) on the parent's lock and returns its
// descriptor; EWOULDBLOCK (wrapped) when LOCK_NB finds it held.
//
// The lock is a file of stockade's user in its own state directory, one
// per parent path, never the parent's cgroup directory: cgroupfs makes
// that 0755, any local user can open it, and anyone who can open a file
// can flock it. A LOCK_EX taken that way held every run in the parent
// before its jail started, without end; a LOCK_SH kept stockade from
// undoing its leaf, and systemd from starting the unit's next process.
// The files are never removed, as runlock's id files are not: an unlink
// would let a second stockade lock a fresh file under the same name.
func lockParent(parent string, how int) (int, error) {
	if err := runlock.EnsureOwnedDir(runlock.CgroupLockDir(), 0o700, 0); err != nil {
		return -1, fmt.Errorf("lock of %s: %w", parent, err)
	}
	path := parentLockPath(parent)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return -1, fmt.Errorf("lock of %s: open %s: %w", parent, path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid() {
		unix.Close(fd)
		return -1, fmt.Errorf("lock of %s: %s is not a file of uid %d", parent, path, os.Geteuid())
	}
	for {
		err = unix.Flock(fd, how)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("lock of %s: flock %s: %w", parent, path, err)
	}
	return fd, nil
}

// parentLockPath is the lock file of the cgroup directory parent.
func parentLockPath(parent string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(parent)))
	return filepath.Join(runlock.CgroupLockDir(), hex.EncodeToString(sum[:16]))
}
