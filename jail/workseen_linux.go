package jail

import (
	"errors"
	"fmt"
	"time"

	"github.com/stockade/stockade/internal/beneath"
	"golang.org/x/sys/unix"
)

// workSeen is what copy-back knows of a --workdir as the jail found it,
// recorded before the overlay is mounted: which directory it is, and the
// clock of its file system at that moment. The jail's view of DIR is live
// (overlay reads the lower layer as it is), so what the jail could have
// seen of any entry is the entry as it was when the run began, if it has
// not changed since; and the kernel sets an inode's ctime on every change
// (write, truncate, chmod, chown, link, unlink, rename, an entry added to
// or removed from a directory), and nobody can set it back. So an entry
// whose ctime is before since is one the jail saw as it is now; anything
// else the host made or changed during the run.
//
// That is the whole snapshot, taken in O(1): a record of DIR's tree
// (names, inodes, sizes, times) would cost a walk of all of DIR at every
// start, however little the run touches, and tell copy-back no more
// except for a directory the host changed (copy-back then keeps it whole:
// see copier.removeEntry).
type workSeen struct {
	dev, ino uint64 // DIR itself: copy-back refuses a directory put in its place
	mnt      uint64 // DIR's mount (statx STATX_MNT_ID; 0 before Linux 5.8)
	// since is a ctime that no change made after the overlay was mounted
	// can have, and (most times) one later than every change made before
	// the run was asked for: see settle.
	since unix.StatxTimestamp
}

// beginWorkSeen records dir when a run's preparation begins.
func beginWorkSeen(dir string) (workSeen, error) {
	fd, seen, err := openWorkdir(dir)
	if err != nil {
		return seen, err
	}
	defer unix.Close(fd)
	seen.since, err = fsClock(fd, dir)
	return seen, err
}

// settle takes the clock again just before the overlay is mounted, and
// makes it since. Timestamps are in ticks of the kernel's coarse clock (4
// ms at HZ=250; whole seconds on some file systems), and an entry changed
// in the tick of since counts as changed during the run: a script that
// writes DIR and starts a run at once would find its last writes kept as
// the host's, unless since is a tick later than they are. Preparing the
// jail usually takes longer than a tick; when it did not, settle waits up
// to maxSettle for the next one.
func (s *workSeen) settle(dir string) error {
	fd, now, err := openWorkdir(dir)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if now.dev != s.dev || now.ino != s.ino {
		return fmt.Errorf("%s was replaced while the run was being prepared", dir)
	}
	begun := s.since
	for waited := time.Duration(0); ; waited += settleStep {
		if s.since, err = fsClock(fd, dir); err != nil {
			return err
		}
		if before(begun, s.since) || waited >= maxSettle {
			return nil
		}
		time.Sleep(settleStep)
	}
}

const (
	maxSettle  = 20 * time.Millisecond
	settleStep = time.Millisecond
)

// openWorkdir opens dir as copy-back will and says which directory it is.
func openWorkdir(dir string) (int, workSeen, error) {
	fd, err := beneath.OpenPath(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW)
	if err != nil {
		return -1, workSeen{}, fmt.Errorf("open %s: %w", dir, err)
	}
	var st unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_TYPE|unix.STATX_INO|unix.STATX_MNT_ID, &st); err != nil {
		unix.Close(fd)
		return -1, workSeen{}, fmt.Errorf("statx %s: %w", dir, err)
	}
	seen := workSeen{dev: devOf(&st), ino: st.Ino}
	if st.Mask&unix.STATX_MNT_ID != 0 {
		seen.mnt = st.Mnt_id
	}
	return fd, seen, nil
}

// fsClock is the time of dir's file system now, as it stamps a ctime: the
// ctime of an unnamed file made there (O_TMPFILE), in the file system's
// own granularity and, for a network file system, its server's clock.
// Without O_TMPFILE there (or the right to make one) it is our own clock
// back to the whole second, as the coarsest file system keeps it; a change
// in that second then counts as one made during the run, which only keeps
// more of the host's.
func fsClock(fd int, dir string) (unix.StatxTimestamp, error) {
	tmp, err := unix.Openat(fd, ".", unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
	if err != nil {
		if errors.Is(err, unix.EIO) || errors.Is(err, unix.EBADF) {
			return unix.StatxTimestamp{}, fmt.Errorf("make an unnamed file in %s: %w", dir, err)
		}
		return unix.StatxTimestamp{Sec: time.Now().Unix()}, nil
	}
	defer unix.Close(tmp)
	var st unix.Statx_t
	if err := unix.Statx(tmp, "", unix.AT_EMPTY_PATH, unix.STATX_CTIME, &st); err != nil {
		return unix.StatxTimestamp{}, fmt.Errorf("statx a file made in %s: %w", dir, err)
	}
	return st.Ctime, nil
}

// devOf is a statx's device as one number, as st_dev would be.
func devOf(st *unix.Statx_t) uint64 {
	return unix.Mkdev(st.Dev_major, st.Dev_minor)
}

// before reports whether a is earlier than b.
func before(a, b unix.StatxTimestamp) bool {
	return a.Sec < b.Sec || a.Sec == b.Sec && a.Nsec < b.Nsec
}
