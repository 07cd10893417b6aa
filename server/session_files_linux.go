package server

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stockade/stockade/api"
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
	case errors.Is(err, errPutRaced):
		return &api.Error{Status: 409, Msg: fmt.Sprintf("%s: %v", p, err)}
	case errors.Is(err, unix.ENXIO):
		return &api.Error{Status: 409, Msg: fmt.Sprintf("%s: a FIFO or socket, not a regular file", p)}
	case errors.Is(err, unix.ENOTEMPTY), errors.Is(err, unix.EEXIST):
		return &api.Error{Status: 409, Msg: fmt.Sprintf("%s: %v", p, err)}
	}
	return &api.Error{Status: 500, Msg: fmt.Sprintf("%s: %v", p, err)}
}

// openWorkDir opens the directory dir below root (".": root itself).
func openWorkDir(root int, dir string) (int, error) {
	how := resolveHow
	how.Flags |= unix.O_DIRECTORY
	fd, err := unix.Openat2(root, dir, &how)
	if errors.Is(err, unix.ENOTDIR) && symlinkOnPath(root, dir) {
		// O_NOFOLLOW|O_DIRECTORY says ENOTDIR of a last component that
		// is a symlink; the caller should hear why it was refused.
		err = unix.ELOOP
	}
	return fd, err
}

// symlinkOnPath says whether a component of p below root is a symlink
// now. It only words an error: the open that failed was the defence.
func symlinkOnPath(root int, p string) bool {
	parts := strings.Split(p, "/")
	for i := range parts {
		var st unix.Stat_t
		if unix.Fstatat(root, strings.Join(parts[:i+1], "/"), &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			return false
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return true
		}
	}
	return false
}

// mkdirsBeneath makes the directories of dir below root, one component
// at a time, each made in the descriptor of the one before, and returns a
// descriptor of the last. Run it as the jail user.
func mkdirsBeneath(root int, dir string) (int, error) {
	fd, err := openWorkDir(root, ".")
	if err != nil {
		return -1, err
	}
	if dir == "." {
		return fd, nil
	}
	for _, c := range strings.Split(dir, "/") {
		if err := unix.Mkdirat(fd, c, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			unix.Close(fd)
			return -1, err
		}
		next, err := openWorkDir(fd, c)
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

// writeWorkFile writes data from r to p below root as the jail user
// (uid, gid: its host ids), creating p and its directories or replacing a
// regular file. Anything but a regular file where p points is refused.
func writeWorkFile(root int, p string, r io.Reader, uid, gid int) (int64, error) {
	var n int64
	err := asJailUser(uid, gid, func() (err error) {
		n, err = writeWorkFileAs(root, p, r)
		return err
	})
	return n, err
}

// putPrefix begins the name a PUT's bytes are written under, beside its
// target, until they are whole.
const putPrefix = ".stockade-put-"

// writeWorkFileAs writes the body aside, under a name of its own in the
// target's directory, and renames it over the target only once the body
// is whole: a PUT refused halfway (413 past --max-body, 408 on a stalled
// body, /work full) left the target truncated and partly overwritten.
// renameat replaces a name and never follows it: a symlink the jail swaps
// in meanwhile is replaced itself, as a FIFO or device would not be
// opened.
func writeWorkFileAs(root int, p string, r io.Reader) (int64, error) {
	dirfd, err := mkdirsBeneath(root, path.Dir(p))
	if err != nil {
		return 0, err
	}
	defer unix.Close(dirfd)
	name := path.Base(p)
	// What is there now must be a regular file, or nothing: a symlink is
	// refused as on every path (ELOOP), a directory, FIFO or device is
	// never replaced. Its permissions are kept.
	mode := uint32(0)
	var st unix.Stat_t
	switch err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case errors.Is(err, unix.ENOENT):
	case err != nil:
		return 0, err
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return 0, unix.ELOOP
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return 0, fmt.Errorf("not a regular file: %w", unix.EEXIST)
	default:
		mode = st.Mode & 0o777
	}
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return 0, err
	}
	tmp := putPrefix + hex.EncodeToString(rnd[:])
	how := unix.OpenHow{
		Flags:   unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Mode:    0o644,
		Resolve: resolveHow.Resolve,
	}
	fd, err := unix.Openat2(dirfd, tmp, &how)
	if err != nil {
		return 0, err
	}
	f := os.NewFile(uintptr(fd), tmp)
	n, err := io.Copy(f, r)
	if err == nil && mode != 0 {
		err = unix.Fchmod(fd, mode)
	}
	// The file written, by its descriptor: what the rename must put at
	// name. The cell shares this directory and can rename the temporary
	// name away and plant a symlink in its place before the renameat,
	// which would then move the cell's symlink to name.
	var wrote unix.Stat_t
	if err == nil {
		err = unix.Fstat(fd, &wrote)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dirfd, tmp, dirfd, name)
	}
	if err != nil {
		_ = unix.Unlinkat(dirfd, tmp, 0)
		return 0, err
	}
	var now unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &now, unix.AT_SYMLINK_NOFOLLOW); err != nil || now.Dev != wrote.Dev || now.Ino != wrote.Ino {
		return 0, errPutRaced
	}
	return n, nil
}

// errPutRaced: what a PUT's rename put at its path is not the file it
// wrote (a process of the session swapped the temporary file), so the
// write is not reported done.
var errPutRaced = errors.New("a process in the session replaced the file being written (the temporary file was swapped before its rename): not written")

// openWorkFile opens p below root for reading: a regular file only.
func openWorkFile(root int, p string) (*os.File, int64, error) {
	fd, st, err := openBeneath(root, p)
	if err != nil {
		if err.Error() == "a symlink (not followed)" {
			err = unix.ELOOP
		}
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
	return asJailUser(uid, gid, func() error { return removeWorkAs(root, p) })
}

func removeWorkAs(root int, p string) error {
	dirfd, err := openWorkDir(root, path.Dir(p))
	if err != nil {
		return err
	}
	defer unix.Close(dirfd)
	err = unix.Unlinkat(dirfd, path.Base(p), 0)
	if errors.Is(err, unix.EISDIR) {
		err = unix.Unlinkat(dirfd, path.Base(p), unix.AT_REMOVEDIR)
	}
	return err
}

// listWork lists the directory dir below root, at most max entries.
func listWork(root int, dir string, max int) (*api.FileList, error) {
	fd, err := openWorkDir(root, dir)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), dir)
	defer f.Close()
	out := &api.FileList{Path: dir, Entries: []api.FileEntry{}}
	for len(out.Entries) < max {
		names, err := f.Readdirnames(min(256, max-len(out.Entries)))
		for _, n := range names {
			out.Entries = append(out.Entries, statEntry(fd, n))
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if len(out.Entries) >= max {
		extra, _ := f.Readdirnames(1)
		out.Truncated = len(extra) > 0
	}
	sort.Slice(out.Entries, func(i, j int) bool { return out.Entries[i].Name < out.Entries[j].Name })
	return out, nil
}

func statEntry(dirfd int, name string) api.FileEntry {
	e := api.FileEntry{Name: api.FSName(name), Type: "other"}
	var st unix.Stat_t
	if unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return e
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		e.Type, e.Size = "file", st.Size
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
	w := &walker{since: since, limits: limits, out: []string{}}
	if root < 0 {
		return w.out, false
	}
	fd, err := openWorkDir(root, ".")
	if err != nil {
		return w.out, true
	}
	w.dir(fd, "", 0)
	sort.Strings(w.out)
	return w.out, w.truncated
}

type walker struct {
	since     unix.Timespec
	limits    workWalk
	seen      int
	out       []string
	truncated bool
	stop      bool
}

// dir walks the directory fd (closed here), whose path is prefix ("" for
// /work, else ending in "/"), depth levels down.
func (w *walker) dir(fd int, prefix string, depth int) {
	f := os.NewFile(uintptr(fd), prefix)
	defer f.Close()
	for !w.stop {
		names, err := f.Readdirnames(256)
		for _, n := range names {
			if w.seen++; w.seen > w.limits.entries {
				w.truncated, w.stop = true, true
				return
			}
			if prefix == "" && n == figureDir {
				continue
			}
			var st unix.Stat_t
			if unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
				continue // gone since it was listed
			}
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				if depth+1 >= maxWorkDepth {
					w.truncated = true
					continue
				}
				sub, err := openWorkDir(fd, n)
				if err != nil {
					w.truncated = w.truncated || !errors.Is(err, unix.ENOENT)
					continue
				}
				w.dir(sub, prefix+n+"/", depth+1)
				if w.stop {
					return
				}
				continue
			}
			if st.Ctim.Sec < w.since.Sec || (st.Ctim.Sec == w.since.Sec && st.Ctim.Nsec < w.since.Nsec) {
				continue
			}
			if len(prefix)+len(n) > maxWorkPath {
				// No route could name it: said, not skipped in silence.
				w.truncated = true
				continue
			}
			if len(w.out) == w.limits.listed {
				w.truncated, w.stop = true, true
				return
			}
			w.out = append(w.out, prefix+n)
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				w.truncated = true
			}
			return
		}
	}
}
