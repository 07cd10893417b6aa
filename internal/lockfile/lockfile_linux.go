package lockfile

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Acquire opens path (creating it 0600, never through a symlink), checks
// that it is a regular file of this user that only this user can open, and
// waits for an exclusive flock on it. A file that fails the check is
// refused, not waited on: an earlier descriptor of another user's outlives
// any chmod. The returned function releases the lock.
func Acquire(path string) (func(), error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock file %s: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid() || st.Mode&0o077 != 0 {
		unix.Close(fd)
		return nil, fmt.Errorf("lock file %s: not a file of uid %d that only it can open (others could hold the lock; remove it)", path, os.Geteuid())
	}
	for {
		err = unix.Flock(fd, unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { unix.Close(fd) }, nil
}
