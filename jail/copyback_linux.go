package jail

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/stockade/stockade/internal/fds"
	"golang.org/x/sys/unix"
)

// maxCopyDepth bounds how deep copyBack goes (one open directory per level
// on each side); the upper layer holds at most WorkInodes directories.
const maxCopyDepth = 1024

// copyBack applies the upper layer of a --workdir overlay to the directory
// itself, after the jail is gone: new and changed files are written (owned
// by uid:gid, never with a set-id bit), whiteouts delete, and an opaque
// directory replaces the directory's old contents. Every step is relative
// to a directory fd, opened without following symlinks, so a link the jail
// planted in an earlier run cannot point a write outside dir. Hard links
// become separate files; extended attributes, devices, fifos and sockets
// are not copied.
//
// The upper layer is walked first and nothing is copied unless all of it
// can be: a tree deeper than maxCopyDepth, or one that would take more
// than limit bytes of the host's disk (its data blocks, plus a block for
// every directory and symlink, which tmpfs stores without one but the
// host's file system does not), is refused whole, so the jail can neither
// leave DIR half-applied nor write twice its --work-size to the host.
func copyBack(upperRoot int, dir string, uid, gid int, limit int64) error {
	src, err := unix.Openat(upperRoot, "upper", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the upper layer: %w", err)
	}
	defer unix.Close(src)
	var sz sizer
	if err := sz.walk(src, 0); err != nil {
		return fmt.Errorf("%s: %w; nothing was copied back", dir, err)
	}
	if cost := sz.bytes + sz.meta*hostBlock; limit > 0 && cost > limit {
		return fmt.Errorf("%s: the changes would take %d bytes of the host's disk (%d of data, %d directories and symlinks at %d bytes each), more than --work-size %d; nothing was copied back",
			dir, cost, sz.bytes, sz.meta, hostBlock, limit)
	}
	dst, err := unix.Openat2(unix.AT_FDCWD, dir, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer unix.Close(dst)
	c := &copier{uid: uid, gid: gid, root: dst, top: dir, links: map[uint64]string{}, buf: make([]byte, 1<<20)}
	return c.dir(src, dst, "", 0)
}

// copier writes at most what the upper layer holds: holes stay holes
// (a 1 TiB sparse file costs its written pages, not a terabyte), and the
// names of one hard-linked inode become hard links again (a thousand links
// to one file are one file's data, not a thousand copies).
type copier struct {
	uid, gid int
	root     int               // the directory's fd
	top      string            // its path, for messages
	links    map[uint64]string // upper inode -> the first path it was copied to
	buf      []byte            // one buffer for every file: a fresh one each made 64,000 empty files cost 38 s of CPU
}

// hostBlock is what a directory or symlink is charged on the host: a block
// of ext4 or xfs at their usual size.
const hostBlock = 4096

// sizer measures the upper layer before anything is copied.
type sizer struct {
	bytes int64           // data blocks of regular files
	meta  int64           // directories and symlinks
	seen  map[uint64]bool // hard-linked inodes already counted
}

func (z *sizer) walk(dirfd, depth int) error {
	if depth > maxCopyDepth {
		return fmt.Errorf("a tree deeper than %d levels", maxCopyDepth)
	}
	names, err := readNames(dirfd)
	if err != nil {
		return fmt.Errorf("read the upper layer: %w", err)
	}
	for _, name := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("stat the upper layer: %w", err)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			if st.Nlink > 1 {
				if z.seen == nil {
					z.seen = map[uint64]bool{}
				}
				if z.seen[st.Ino] {
					continue
				}
				z.seen[st.Ino] = true
			}
			z.bytes += st.Blocks * 512
		case unix.S_IFLNK:
			z.meta++
		case unix.S_IFDIR:
			z.meta++
			sub, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("open the upper layer: %w", err)
			}
			err = z.walk(sub, depth+1)
			unix.Close(sub)
			if err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *copier) dir(src, dst int, rel string, depth int) error {
	where := c.top + rel
	if depth > maxCopyDepth {
		return fmt.Errorf("%s: deeper than %d levels, not copied back", where, maxCopyDepth)
	}
	names, err := readNames(src)
	if err != nil {
		return fmt.Errorf("read %s in the upper layer: %w", where, err)
	}
	for _, name := range names {
		if err := c.entry(src, dst, name, rel+"/"+name, depth); err != nil {
			return err
		}
	}
	return nil
}

func (c *copier) entry(src, dst int, name, rel string, depth int) error {
	where := c.top + rel
	var st unix.Stat_t
	if err := unix.Fstatat(src, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("stat %s: %w", where, err)
	}
	mode := st.Mode & 0o777 // never a set-id or sticky bit from the jail
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		if st.Rdev == 0 { // a whiteout: the jail deleted it
			return removeAt(dst, name, where)
		}
		return nil
	case unix.S_IFDIR:
		sub, err := unix.Openat(src, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s in the upper layer: %w", where, err)
		}
		defer unix.Close(sub)
		var cur unix.Stat_t
		exists := unix.Fstatat(dst, name, &cur, unix.AT_SYMLINK_NOFOLLOW) == nil
		if exists && (cur.Mode&unix.S_IFMT != unix.S_IFDIR || opaque(sub)) {
			// Replaced: a directory over a file, or one the jail removed
			// and made anew (overlay marks it opaque).
			if err := removeAt(dst, name, where); err != nil {
				return err
			}
			exists = false
		}
		if !exists {
			if err := unix.Mkdirat(dst, name, 0o700); err != nil {
				return fmt.Errorf("mkdir %s: %w", where, err)
			}
		}
		out, err := unix.Openat(dst, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", where, err)
		}
		defer unix.Close(out)
		if err := c.own(out, mode, where); err != nil {
			return err
		}
		return c.dir(sub, out, rel, depth+1)
	case unix.S_IFREG:
		if st.Nlink > 1 {
			if first, ok := c.links[st.Ino]; ok {
				return c.link(first, dst, name, where)
			}
			c.links[st.Ino] = rel
		}
		return c.file(src, dst, name, mode, where)
	case unix.S_IFLNK:
		target, err := readlinkAt(src, name)
		if err != nil {
			return fmt.Errorf("readlink %s: %w", where, err)
		}
		if err := removeAt(dst, name, where); err != nil {
			return err
		}
		// Left owned by stockade's user: a chown by name could be made
		// to land on whatever the directory's owner swaps in meanwhile.
		if err := unix.Symlinkat(target, dst, name); err != nil {
			return fmt.Errorf("symlink %s: %w", where, err)
		}
	}
	return nil
}

// link makes name in dst another name of the file already copied to first
// (a path below the directory, opened without symlinks).
func (c *copier) link(first string, dst int, name, where string) error {
	dirPart, base := filepath.Split(first)
	pfd, err := unix.Openat2(c.root, "."+dirPart, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return fmt.Errorf("link %s to %s: %w", where, first, err)
	}
	defer unix.Close(pfd)
	if err := removeAt(dst, name, where); err != nil {
		return err
	}
	if err := unix.Linkat(pfd, base, dst, name, 0); err != nil {
		return fmt.Errorf("link %s to %s: %w", where, first, err)
	}
	return nil
}

// file replaces name in dst with the upper layer's copy.
func (c *copier) file(src, dst int, name string, mode uint32, where string) error {
	in, err := unix.Openat(src, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s in the upper layer: %w", where, err)
	}
	inF := os.NewFile(uintptr(in), where)
	defer inF.Close()
	if err := removeAt(dst, name, where); err != nil {
		return err
	}
	out, err := unix.Openat(dst, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", where, err)
	}
	outF := os.NewFile(uintptr(out), where)
	defer outF.Close()
	if err := c.own(out, mode, where); err != nil {
		return err
	}
	if err := copyData(in, out, c.buf); err != nil {
		return fmt.Errorf("write %s: %w", where, err)
	}
	return nil
}

// copyData copies the data extents of in to out and gives out in's size,
// so holes stay holes; buf is reused across files.
func copyData(in, out int, buf []byte) error {
	var st unix.Stat_t
	if err := unix.Fstat(in, &st); err != nil {
		return err
	}
	if st.Size == 0 {
		return nil // a fresh file is already empty
	}
	for off := int64(0); off < st.Size; {
		data, err := unix.Seek(in, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if err != nil {
			return err
		}
		hole, err := unix.Seek(in, data, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		for data < hole {
			n, err := unix.Pread(in, buf[:min(int64(len(buf)), hole-data)], data)
			if err != nil {
				return err
			}
			if n == 0 {
				break
			}
			if _, err := unix.Pwrite(out, buf[:n], data); err != nil {
				return err
			}
			data += int64(n)
		}
		off = hole
	}
	return unix.Ftruncate(out, st.Size)
}

// own gives a copied entry the jail user's host ids and its mode, owner
// first: chown clears set-id bits, and there are none to keep.
func (c *copier) own(fd int, mode uint32, where string) error {
	if err := unix.Fchown(fd, c.uid, c.gid); err != nil {
		return fmt.Errorf("chown %s: %w", where, err)
	}
	if err := unix.Fchmod(fd, mode); err != nil {
		return fmt.Errorf("chmod %s: %w", where, err)
	}
	return nil
}

// removeAt removes name from dir, a whole tree if it is a directory, every
// step relative to an fd opened without following links; a name that is
// not there is fine.
func removeAt(dir int, name, where string) error {
	return removeAtDepth(dir, name, where, 0)
}

func removeAtDepth(dir int, name, where string, depth int) error {
	err := unix.Unlinkat(dir, name, 0)
	if errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EPERM) {
		if depth > maxCopyDepth {
			return fmt.Errorf("remove %s: deeper than %d levels", where, maxCopyDepth)
		}
		sub, oerr := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if oerr != nil {
			return fmt.Errorf("remove %s: %w", where, oerr)
		}
		names, rerr := readNames(sub)
		for _, n := range names {
			if rerr == nil {
				rerr = removeAtDepth(sub, n, where+"/"+n, depth+1)
			}
		}
		unix.Close(sub)
		if rerr != nil {
			return rerr
		}
		err = unix.Unlinkat(dir, name, unix.AT_REMOVEDIR)
	}
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove %s: %w", where, err)
	}
	return nil
}

// opaque reports overlay's mark on an upper directory that replaced the
// lower one entirely.
func opaque(dirfd int) bool {
	buf := make([]byte, 8)
	n, err := unix.Fgetxattr(dirfd, "user.overlay.opaque", buf)
	return err == nil && n == 1 && buf[0] == 'y'
}

func readNames(dirfd int) ([]string, error) {
	d, err := fds.Dup(dirfd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(d), "dir")
	defer f.Close()
	// A dup shares the offset: the size walk has read this directory to
	// its end already.
	if _, err := unix.Seek(d, 0, 0); err != nil {
		return nil, err
	}
	return f.Readdirnames(-1)
}

func readlinkAt(dirfd int, name string) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}
