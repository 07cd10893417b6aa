package beneath

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// noLinks refuses a symlink at any component, the last included, and
// /proc's magic links.
const noLinks = unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// Resolve is how every open below a directory resolves its path.
const Resolve = unix.RESOLVE_BENEATH | noLinks

// dirFlags open a directory to list it, or to open, make and remove names
// in it.
const dirFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW

// Open opens rel below dirfd with flags (O_CLOEXEC added). A symlink on
// the way is ELOOP; "..", an absolute path or an absolute symlink that
// would leave dirfd is EXDEV.
func Open(dirfd int, rel string, flags uint64) (int, error) {
	return open(dirfd, rel, flags, Resolve)
}

// OpenSameMount is Open that also never crosses onto another mount (EXDEV
// then): the host may have mounted something on a directory below dirfd.
func OpenSameMount(dirfd int, rel string, flags uint64) (int, error) {
	return open(dirfd, rel, flags, Resolve|unix.RESOLVE_NO_XDEV)
}

// OpenPath opens an absolute host path with flags (O_CLOEXEC added)
// through no symlink and no magic link at any component. There is no
// directory to stay beneath: the path is the caller's, but a directory on
// it may be writable by someone who would plant a link.
func OpenPath(p string, flags uint64) (int, error) {
	return open(unix.AT_FDCWD, p, flags, noLinks)
}

func open(dirfd int, rel string, flags, resolve uint64) (int, error) {
	how := unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Resolve: resolve}
	for {
		fd, err := unix.Openat2(dirfd, rel, &how)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue // RESOLVE_BENEATH asks for a retry after a concurrent rename
		}
		if errors.Is(err, unix.ENOTDIR) && flags&unix.O_DIRECTORY != 0 && lastIsSymlink(dirfd, rel) {
			// O_NOFOLLOW|O_DIRECTORY says ENOTDIR of a trailing symlink;
			// the caller should hear that it was one.
			err = unix.ELOOP
		}
		return fd, err
	}
}

// lastIsSymlink says whether rel's last component below dirfd is a symlink
// now. It only words an error: the open that failed was the defence.
func lastIsSymlink(dirfd int, rel string) bool {
	var st unix.Stat_t
	return unix.Fstatat(dirfd, rel, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK
}

// OpenDir opens the directory rel below dirfd (".": dirfd itself, a
// descriptor of its own) to list it or work in it.
func OpenDir(dirfd int, rel string) (int, error) {
	return Open(dirfd, rel, dirFlags)
}

// OpenDirSameMount is OpenDir onto the same mount only.
func OpenDirSameMount(dirfd int, rel string) (int, error) {
	return OpenSameMount(dirfd, rel, dirFlags)
}

// OpenFile opens rel below dirfd for reading and says what it opened. It
// opens with O_NONBLOCK, so a FIFO swapped in is not waited on; the
// caller reads only what fstat says is a regular file.
func OpenFile(dirfd int, rel string) (int, unix.Stat_t, error) {
	var st unix.Stat_t
	fd, err := Open(dirfd, rel, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK)
	if err != nil {
		return -1, st, err
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, st, err
	}
	return fd, st, nil
}

// MkdirAll opens the directory rel below dirfd with flags (O_DIRECTORY
// added), making each missing component with mode, one component at a
// time, each opened beneath the one before. made, if not nil, hears each
// directory made, by its path from dirfd. "" and "." are dirfd itself (a
// descriptor of its own).
func MkdirAll(dirfd int, rel string, flags uint64, mode uint32, made func(string)) (int, error) {
	flags |= unix.O_DIRECTORY
	fd := dirfd // borrowed: closed only once a component replaced it
	prefix := ""
	for _, c := range strings.Split(rel, "/") {
		if c == "" || c == "." {
			continue
		}
		prefix = strings.TrimPrefix(prefix+"/"+c, "/")
		// Opened first, made only when missing: most callers share their
		// parents, and a failing mkdirat for each was a call wasted.
		next, err := Open(fd, c, flags)
		if errors.Is(err, unix.ENOENT) {
			if err = unix.Mkdirat(fd, c, mode); err == nil && made != nil {
				made(prefix)
			}
			if err == nil || errors.Is(err, unix.EEXIST) {
				next, err = Open(fd, c, flags)
			}
		}
		if fd != dirfd {
			unix.Close(fd)
		}
		if err != nil {
			return -1, err
		}
		fd = next
	}
	if fd == dirfd {
		return Open(dirfd, ".", flags) // the caller closes what it gets
	}
	return fd, nil
}

// ReadCapped reads the whole file fd if it fits in budget (full true), and
// never more than budget bytes whatever size fstat claimed.
func ReadCapped(fd int, size, budget int64) ([]byte, bool, error) {
	if size > budget {
		return nil, false, nil
	}
	b := make([]byte, 0, size)
	chunk := make([]byte, 64<<10)
	for {
		n, err := unix.Read(fd, chunk)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, false, err
		}
		if n == 0 {
			return b, true, nil
		}
		if int64(len(b)+n) > budget {
			return nil, false, nil
		}
		b = append(b, chunk[:n]...)
	}
}

// ErrReplaced: what the rename put at a written path is not the file
// written (someone with the directory swapped the temporary name for
// something else before the rename), so the write did not happen.
var ErrReplaced = errors.New("the file being written was replaced before its rename")

// ErrNotRegular: what is at a path to be written is a directory, FIFO,
// socket or device, which a write never replaces.
var ErrNotRegular = errors.New("not a regular file")

// WriteFile writes r to rel below dirfd, making its directories (0755),
// under a temporary name beside it that begins with tmpPrefix, and renames
// that over rel only once r is whole: a write cut halfway leaves rel as it
// was. What is at rel must be a regular file (its permissions are kept) or
// nothing: a symlink is ELOOP, anything else ErrNotRegular (wrapping
// EEXIST). renameat replaces a name and never follows it, and the name's
// inode is read back after the rename (ErrReplaced).
func WriteFile(dirfd int, rel string, r io.Reader, tmpPrefix string) (int64, error) {
	dir, err := MkdirAll(dirfd, path.Dir(rel), unix.O_RDONLY|unix.O_NOFOLLOW, 0o755, nil)
	if err != nil {
		return 0, err
	}
	defer unix.Close(dir)
	name := path.Base(rel)
	mode := uint32(0)
	var st unix.Stat_t
	switch err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case errors.Is(err, unix.ENOENT):
	case err != nil:
		return 0, err
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return 0, unix.ELOOP
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return 0, errNotRegular
	default:
		mode = st.Mode & 0o777
	}
	// A name nobody can guess: one planted in advance would refuse the
	// O_EXCL create.
	var rnd [8]byte
	if _, err := unix.Getrandom(rnd[:], 0); err != nil {
		return 0, err
	}
	tmp := tmpPrefix + hex.EncodeToString(rnd[:])
	how := unix.OpenHow{
		Flags:   unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Mode:    0o644,
		Resolve: Resolve,
	}
	fd, err := unix.Openat2(dir, tmp, &how)
	if err != nil {
		return 0, err
	}
	f := os.NewFile(uintptr(fd), tmp)
	n, err := io.Copy(f, r)
	if err == nil && mode != 0 {
		err = unix.Fchmod(fd, mode)
	}
	// The file written, by its descriptor: what the rename must put at
	// name. Whoever shares this directory can rename the temporary name
	// away and plant a symlink in its place before the renameat, which
	// would then move their symlink to name.
	var wrote unix.Stat_t
	if err == nil {
		err = unix.Fstat(fd, &wrote)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dir, tmp, dir, name)
	}
	if err != nil {
		_ = unix.Unlinkat(dir, tmp, 0)
		return 0, err
	}
	var now unix.Stat_t
	if err := unix.Fstatat(dir, name, &now, unix.AT_SYMLINK_NOFOLLOW); err != nil || now.Dev != wrote.Dev || now.Ino != wrote.Ino {
		return 0, ErrReplaced
	}
	return n, nil
}

var errNotRegular = fmt.Errorf("%w: %w", ErrNotRegular, unix.EEXIST)

// Remove removes rel below dirfd: a file, a symlink (itself, never what
// it points at) or an empty directory.
func Remove(dirfd int, rel string) error {
	dir, err := OpenDir(dirfd, path.Dir(rel))
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	err = unix.Unlinkat(dir, path.Base(rel), 0)
	if errors.Is(err, unix.EISDIR) {
		err = unix.Unlinkat(dir, path.Base(rel), unix.AT_REMOVEDIR)
	}
	return err
}

// RemoveAll removes name from dirfd, a whole tree if it is a directory,
// never through a symlink nor onto another mount, at most levels levels
// down (an error past them, with what was below removed).
func RemoveAll(dirfd int, name string, levels int) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EPERM) {
		if levels <= 0 {
			return ErrTooDeep
		}
		sub, oerr := OpenDirSameMount(dirfd, name)
		if oerr != nil {
			return oerr
		}
		// A directory may be read-only; everything here is the caller's
		// (or the caller is root).
		rerr := unix.Fchmod(sub, 0o700)
		var names []string
		if rerr == nil {
			names, rerr = Names(sub)
		}
		for _, n := range names {
			if rerr == nil {
				rerr = RemoveAll(sub, n, levels-1)
			}
		}
		unix.Close(sub)
		if rerr != nil {
			return rerr
		}
		err = unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
	}
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}

// ErrTooDeep: a tree goes deeper than a RemoveAll's levels.
var ErrTooDeep = errors.New("deeper than the levels allowed")

// Names lists every name in the directory dirfd, sorted, reading from its
// start whatever was read before. It has no bound: for a directory whose
// size the caller already bounds (a jail's disk, a stage it made).
func Names(dirfd int) ([]string, error) {
	if _, err := unix.Seek(dirfd, 0, 0); err != nil {
		return nil, err
	}
	var names []string
	buf := make([]byte, 32<<10)
	for {
		n, err := unix.ReadDirent(dirfd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			break
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
	sort.Strings(names)
	return names, nil
}
