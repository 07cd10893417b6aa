package runlock

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// IDDir is where a HostRoot stockade takes the number behind its jail's host
// uid. It is fixed, never $STOCKADE_LOCK_DIR: the uid is a host-wide
// resource, and two stockades with lock directories of their own (a test,
// a second service, a container with its own /run but the host's uids and
// a bind of this directory) that numbered their uids by their own slots
// would both run a jail as the same uid, and then one jail could read the
// other's live /work through the 0710 run directory.
const IDDir = "/run/stockade/ids"

// IDsDir is IDDir for HostRoot, and ids/ in UserDir for root of a user
// namespace that is not: the jail ids it can map are that namespace's,
// and one host user's stockades are all that share them.
func IDsDir() string {
	if HostRoot() {
		return IDDir
	}
	return filepath.Join(UserDir(), "ids")
}

// CgroupLockDir holds the locks stockades take on a cgroup v2 parent they
// share (see package cgroup): like IDsDir, fixed for HostRoot whatever
// $STOCKADE_LOCK_DIR says, since every stockade using a parent must take
// the same lock, and UserDir's for anyone else, whose parents are
// delegated to them alone.
func CgroupLockDir() string {
	if HostRoot() {
		return "/run/stockade/cgroups"
	}
	return filepath.Join(UserDir(), "cgroups")
}

// ID is a host-wide number held for a run's life: a file in IDDir per
// number, flock(2)ed. The files are never removed (an unlink would let a
// second stockade lock a fresh file under the same name while the first
// still holds the old one); there are never more than the most runs that
// were ever live at once.
type ID struct {
	n  int
	fd int
}

// AcquireID takes a number in dir whose lock is free: hint first, when it
// is in range (a run passes its slot, which with the default lock
// directory is the number that is usually free), else the lowest free one.
// With n runs live, starting from 0 cost every start n opens and failed
// flocks of the numbers held (O(n) per start, O(n^2) for a batch of n);
// the hint makes it one. The flock alone proves the number is ours, so a
// wrong hint (another lock directory's slot, a number held by a run that
// started meanwhile) only costs the scan. Numbers stay below the most runs
// ever live at once plus the largest slot, so the files stay few.
func AcquireID(dir string, hint int) (*ID, error) {
	if err := ensureDir(dir); err != nil {
		return nil, err
	}
	if hint > 0 && hint < MaxSlots {
		id, err := tryID(dir, hint)
		if id != nil || err != nil {
			return id, err
		}
	}
	for n := range MaxSlots {
		id, err := tryID(dir, n)
		if id != nil || err != nil {
			return id, err
		}
	}
	return nil, fmt.Errorf("uid locks: all %d numbers in %s are held by live runs", MaxSlots, dir)
}

// tryID takes number n if its lock is free; nil, nil when it is held.
func tryID(dir string, n int) (*ID, error) {
	path := filepath.Join(dir, strconv.Itoa(n))
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("uid locks: open %s: %w", path, err)
	}
	err = flock(fd, unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		unix.Close(fd)
		return nil, nil
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("uid locks: flock %s: %w", path, err)
	}
	return &ID{n: n, fd: fd}, nil
}

// N is the number, unique among the IDs held at once from one directory.
func (i *ID) N() int { return i.n }

// Release drops the lock. Call it only when nothing of the run that held
// the number can still run as its uid.
func (i *ID) Release() {
	if i.fd >= 0 {
		unix.Close(i.fd)
		i.fd = -1
	}
}
