package server

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sort"
	"time"

	"github.com/stockade/stockade/api"

	"github.com/stockade/stockade/internal/beneath"
	"golang.org/x/sys/unix"
)

// A session's /work is read and written by the server, as root, while
// the jail's code changes it as it likes: swaps a directory for a
// symlink to /etc, plants a FIFO where a file was, races every step.
// So every path is opened relative to the server's own descriptor of
// the tmpfs with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|
// RESOLVE_NO_MAGICLINKS), one component's directory at a time where
// the server creates something, and what was opened is checked with
// fstat before a byte is read or written. A hard link cannot reach out:
// the tmpfs is its own filesystem. What changes /work is done as the jail
// user (asJailUser): with no more power over it than the jail has.

// asJailUser runs fn on a thread of its own whose filesystem ids are the
// jail user's host ids. The tmpfs belongs to the jail's user namespace,
// where host root has no mapping: a file root made there would be refused
// (EOVERFLOW), and root's capabilities would let it write what the jail
// user cannot. With the ids changed the kernel drops the thread's
// filesystem capabilities, so it is the jail user in all but name. The
// thread is never given back: it ends with fn's goroutine, its ids with
// it, and no other goroutine ever runs on it.
func asJailUser(uid, gid int, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // not unlocked: the thread exits with this goroutine
		if err := unix.Setfsgid(gid); err != nil {
			errc <- fmt.Errorf("setfsgid %d: %w", gid, err)
			return
		}
		if err := unix.Setfsuid(uid); err != nil {
			errc <- fmt.Errorf("setfsuid %d: %w", uid, err)
			return
		}
		// Read back: setfsuid reports no failure but EPERM.
		u, _ := unix.SetfsuidRetUid(-1)
		g, _ := unix.SetfsgidRetGid(-1)
		if u != uid || g != gid {
			errc <- fmt.Errorf("filesystem ids are %d:%d, not the jail user's %d:%d", u, g, uid, gid)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// openWorkRoot opens the jail's /work (its host path, valid in this
// process) as the session's own descriptor.
func openWorkRoot(host string) (int, error) {
	if host == "" {
		return -1, nil
	}
	fd, err := unix.Open(host, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open /work: %w", err)
	}
	return fd, nil
}

// workError turns an openat2 or write failure on a /work path into the
// caller's answer.
func workError(p string, err error) *api.Error {
	switch {
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
		return &api.Error{Status: 403, Msg: fmt.Sprintf("%s: a symlink on the way (not followed)", p)}
	case errors.Is(err, unix.ENOENT):
		return &api.Error{Status: 404, Msg: fmt.Sprintf("%s: no such file in /work", p)}
	case errors.Is(err, unix.ENOTDIR):
		return &api.Error{Status: 404, Msg: fmt.Sprintf("%s: a part of the path is not a directory", p)}
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT), errors.Is(err, unix.EFBIG):
		return &api.Error{Status: 507, Msg: fmt.Sprintf("%s: /work is full (its size is the profile's work_size)", p)}
	case errors.Is(err, beneath.ErrReplaced):
		return &api.Error{Status: 409, Msg: fmt.Sprintf("%s: %v", p, errPutRaced)}
	case errors.Is(err, unix.ENXIO):
		return &api.Error{Status: 409, Msg: fmt.Sprintf("%s: a FIFO or socket, not a regular file", p)}
	case errors.Is(err, unix.ENOTEMPTY), errors.Is(err, unix.EEXIST):
		return &api.Error{Status: 409, Msg: fmt.Sprintf("%s: %v", p, err)}
	}
	return &api.Error{Status: 500, Msg: fmt.Sprintf("%s: %v", p, err)}
}

// writeWorkFile writes data from r to p below root as the jail user
// (uid, gid: its host ids), creating p and its directories or replacing a
// regular file. Anything but a regular file where p points is refused.
func writeWorkFile(root int, p string, r io.Reader, uid, gid int) (int64, error) {
	var n int64
	err := asJailUser(uid, gid, func() (err error) {
		n, err = beneath.WriteFile(root, p, r, putPrefix)
		return err
	})
	return n, err
}

// putPrefix begins the name a PUT's bytes are written under, beside its
// target, until they are whole (beneath.WriteFile): a PUT refused halfway
// (413 past --max-body, 408 on a stalled body, /work full) leaves the
// target as it was.
const putPrefix = ".stockade-put-"

// errPutRaced: what a PUT's rename put at its path is not the file it
// wrote (a process of the session swapped the temporary file), so the
// write is not reported done.
var errPutRaced = errors.New("a process in the session replaced the file being written (the temporary file was swapped before its rename): not written")

// openWorkFile opens p below root for reading: a regular file only.
func openWorkFile(root int, p string) (*os.File, int64, error) {
	fd, st, err := beneath.OpenFile(root, p)
	if err != nil {
		return nil, 0, err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return os.NewFile(uintptr(fd), p), st.Size, nil
	case unix.S_IFDIR:
		unix.Close(fd)
		return nil, 0, errIsDir
	}
	unix.Close(fd)
	return nil, 0, errNotRegular
}

var (
	errIsDir      = errors.New("a directory: list it with GET .../files?path=DIR")
	errNotRegular = errors.New("not a regular file (a FIFO, socket or device): not read")
)

// removeWork removes p below root as the jail user: a file, a symlink
// (itself, never what it points at) or an empty directory.
func removeWork(root int, p string, uid, gid int) error {
	return asJailUser(uid, gid, func() error { return beneath.Remove(root, p) })
}

// listWork lists the directory dir below root, at most max entries.
func listWork(root int, dir string, max int) (*api.FileList, error) {
	entries, more, err := beneath.List(root, dir, max)
	if err != nil {
		return nil, err
	}
	out := &api.FileList{Path: dir, Entries: make([]api.FileEntry, 0, len(entries)), Truncated: more}
	for _, be := range entries {
		out.Entries = append(out.Entries, fileEntry(be.Name, be))
	}
	return out, nil
}

func fileEntry(name string, be beneath.Entry) api.FileEntry {
	e := api.FileEntry{Name: api.FSName(name), Type: "other"}
	switch be.Type() {
	case unix.S_IFREG:
		e.Type, e.Size = "file", be.Size
	case unix.S_IFDIR:
		e.Type = "dir"
	case unix.S_IFLNK:
		e.Type = "symlink"
	}
	return e
}

// workWalk bounds the walk behind files_changed: the entries it visits
// (the work), the paths it lists, and (through maxWorkDepth and each
// name's 255 bytes) the path it holds for the directory it is in. A
// jail's /work can hold 65,536 inodes of paths 8 KiB long; the server
// never holds more than these allow.
type workWalk struct {
	entries int // directory entries visited, at most
	listed  int // paths listed, at most
}

var workWalkLimits = workWalk{entries: 10000, listed: 1000}

// workClock is the time from which a change in /work is an exec's: the
// kernel stamps a file's ctime (on every write, chmod, rename or link,
// and which no call can set back) from the coarse real-time clock, so
// that clock, read now, is at most what the exec's changes will carry.
// After tick, it waits for the clock to move on once, so that what was
// written just before (the request's files) is older.
func workClock(tick bool) unix.Timespec {
	var t unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_REALTIME_COARSE, &t)
	for tick {
		time.Sleep(time.Millisecond)
		var now unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_REALTIME_COARSE, &now)
		if now != t {
			return now
		}
	}
	return t
}

// changedInWork walks /work below root once (directories opened one
// component at a time, beneath the one before, never through a symlink)
// and lists the paths whose ctime is since or later, sorted, within
// limits: at most limits.entries visited and limits.listed listed. It says
// truncated when a bound stopped it, a directory could not be opened or a
// changed path is longer than the files routes take (maxWorkPath): the
// list is then not all that changed.
func changedInWork(root int, since unix.Timespec, limits workWalk) ([]string, bool) {
	out, truncated := []string{}, false
	if root < 0 {
		return out, false
	}
	walk := beneath.Walk{MaxEntries: limits.entries}
	walk.Cut = func(string) { truncated = true }
	walk.Failed = func(dir string, err error) beneath.Step {
		truncated = truncated || !errors.Is(err, unix.ENOENT) // gone since it was listed
		return beneath.Next
	}
	walk.Visit = func(p string, depth int, e beneath.Entry) beneath.Step {
		switch {
		case depth == 0 && e.Name == figureDir, e.Mode == 0: // gone since it was listed
			return beneath.Next
		case e.Type() == unix.S_IFDIR:
			if depth+1 >= maxWorkDepth {
				truncated = true
				return beneath.Next
			}
			return beneath.Descend
		case e.Ctim.Sec < since.Sec || (e.Ctim.Sec == since.Sec && e.Ctim.Nsec < since.Nsec):
			return beneath.Next
		case len(p) > maxWorkPath:
			// No route could name it: said, not skipped in silence.
			truncated = true
			return beneath.Next
		case len(out) == limits.listed:
			truncated = true
			return beneath.Stop
		}
		out = append(out, p)
		return beneath.Next
	}
	walk.Run(root)
	sort.Strings(out)
	return out, truncated
}
