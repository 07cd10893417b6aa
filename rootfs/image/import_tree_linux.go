package image

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/stockade/stockade/internal/beneath"
	"golang.org/x/sys/unix"
)

// tree is the directory an import writes. Every operation goes through
// *at system calls relative to the root's descriptor, and every directory
// on the way is opened with openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, so
// a symlink an earlier entry planted (lib -> /etc, then lib/x) can never
// redirect a write: this is the class of Judge0's CVE-2024-28185. Final
// components are never followed either (O_NOFOLLOW, AT_SYMLINK_NOFOLLOW,
// linkat without AT_SYMLINK_FOLLOW).
type tree struct {
	fd       int
	dir      string
	dirModes map[string]uint32 // applied at the end: a 0555 directory must still take files meanwhile
}

// errThroughSymlink is what walking into a symlinked directory gives.
var errThroughSymlink = errors.New("a parent directory is a symlink; writing through it is refused")

func openTree(dir string) (*tree, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	return &tree{fd: fd, dir: dir, dirModes: make(map[string]uint32)}, nil
}

func (t *tree) close() { unix.Close(t.fd) }

// openDir opens the directory rel (clean, relative) as an O_PATH
// descriptor, creating missing directories (0700 for now) if create is set.
func (t *tree) openDir(rel string, create bool) (int, error) {
	fd, err := beneath.Open(t.fd, rel, unix.O_PATH|unix.O_DIRECTORY)
	if err == nil || !errors.Is(err, unix.ENOENT) || !create {
		return fd, t.walkErr(rel, err)
	}
	// A directory the layer implies but does not list gets the usual
	// mode, unless an entry for it comes later.
	fd, err = beneath.MkdirAll(t.fd, rel, unix.O_PATH, 0o700, func(made string) { t.dirModes[made] = 0o755 })
	return fd, t.walkErr(rel, err)
}

func (t *tree) walkErr(rel string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.ELOOP):
		return errThroughSymlink
	case errors.Is(err, unix.EXDEV):
		return errors.New("the path leaves the root")
	case errors.Is(err, unix.ENOSYS):
		return errors.New("import needs openat2 (Linux 5.6 or later)")
	case errors.Is(err, unix.ENOTDIR):
		return fmt.Errorf("%s: a parent is not a directory", rel)
	}
	return fmt.Errorf("%s: %w", rel, err)
}

// parent opens rel's parent directory and returns it with rel's base name.
func (t *tree) parent(rel string, create bool) (int, string, error) {
	dir, base := splitPath(rel)
	fd, err := t.openDir(dir, create)
	return fd, base, err
}

// mkdir makes rel a directory, keeping one that is there (layers add to
// the directories below them) and replacing anything else.
func (t *tree) mkdir(rel string, mode uint32) error {
	pfd, base, err := t.parent(rel, true)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	err = unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW)
	if err == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := t.removeAt(pfd, base, rel); err != nil {
			return err
		}
	}
	if err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := unix.Mkdirat(pfd, base, 0o700); err != nil {
			return fmt.Errorf("mkdir %s: %w", rel, err)
		}
	}
	t.dirModes[rel] = mode
	return nil
}

// create writes a regular file at rel from r, replacing what is there.
func (t *tree) create(rel string, r io.Reader, mode uint32, mtime time.Time) error {
	return t.replace(rel, func(pfd int, base string) error {
		fd, err := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return fmt.Errorf("create %s: %w", rel, err)
		}
		f := os.NewFile(uintptr(fd), rel)
		defer f.Close()
		if _, err := io.Copy(f, r); err != nil {
			return fmt.Errorf("write %s: %w", rel, err)
		}
		if err := unix.Fchmod(fd, mode); err != nil {
			return fmt.Errorf("chmod %s: %w", rel, err)
		}
		// Keep mtimes: CPython checks a .pyc against its source's mtime, and a
		// read-only root cannot rewrite stale ones.
		tv := unix.NsecToTimeval(mtime.UnixNano())
		if err := unix.Futimes(fd, []unix.Timeval{tv, tv}); err != nil {
			return fmt.Errorf("set times of %s: %w", rel, err)
		}
		return f.Close()
	})
}

// replace removes what is at rel, if anything, and calls mk with rel's
// parent directory (opened beneath the tree, made if missing) and the name
// to make in it.
func (t *tree) replace(rel string, mk func(pfd int, base string) error) error {
	pfd, base, err := t.parent(rel, true)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := t.removeAt(pfd, base, rel); err != nil {
		return err
	}
	return mk(pfd, base)
}

// symlink makes rel a symlink to target, replacing what is there. The
// target is data, not followed here: inside the jail it resolves against
// the jail's own root.
func (t *tree) symlink(rel, target string) error {
	return t.replace(rel, func(pfd int, base string) error {
		if err := unix.Symlinkat(target, pfd, base); err != nil {
			return fmt.Errorf("symlink %s: %w", rel, err)
		}
		return nil
	})
}

// link makes rel a hardlink to target, both inside the tree. linkat without
// AT_SYMLINK_FOLLOW links a symlink itself, never what it points to.
func (t *tree) link(rel, target string) error {
	tfd, tbase, err := t.parent(target, false)
	if err != nil {
		return fmt.Errorf("hardlink target %s: %w", target, err)
	}
	defer unix.Close(tfd)
	return t.replace(rel, func(pfd int, base string) error {
		if err := unix.Linkat(tfd, tbase, pfd, base, 0); err != nil {
			return fmt.Errorf("hardlink %s to %s: %w", rel, target, err)
		}
		return nil
	})
}

// remove deletes rel and all below it, if it is there. A parent that does
// not exist means there is nothing to delete.
func (t *tree) remove(rel string) error {
	pfd, base, err := t.parent(rel, false)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	return t.removeAt(pfd, base, rel)
}

// clear deletes everything in the directory rel, keeping rel.
func (t *tree) clear(rel string) error {
	fd, err := t.openDir(rel, false)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return t.removeChildren(fd, rel)
}

// removeAt deletes name in dirfd, recursively, without following symlinks.
func (t *tree) removeAt(dirfd int, name, rel string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("stat %s: %w", rel, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", rel, err)
		}
		err = t.removeChildren(fd, rel)
		unix.Close(fd)
		if err != nil {
			return err
		}
		for k := range t.dirModes {
			if k == rel || strings.HasPrefix(k, rel+"/") {
				delete(t.dirModes, k)
			}
		}
		if err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR); err != nil {
			return fmt.Errorf("remove %s: %w", rel, err)
		}
		return nil
	}
	if err := unix.Unlinkat(dirfd, name, 0); err != nil {
		return fmt.Errorf("remove %s: %w", rel, err)
	}
	return nil
}

func (t *tree) removeChildren(fd int, rel string) error {
	// Readdirnames needs a readable descriptor; O_PATH ones are not.
	dfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", rel, err)
	}
	d := os.NewFile(uintptr(dfd), rel)
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return fmt.Errorf("read %s: %w", rel, err)
	}
	for _, n := range names {
		child := n
		if rel != "." {
			child = rel + "/" + n
		}
		if err := t.removeAt(fd, n, child); err != nil {
			return err
		}
	}
	return nil
}

// applyDirModes gives the directories their modes from the image, last,
// through descriptors opened without following symlinks.
func (t *tree) applyDirModes() error {
	for rel, mode := range t.dirModes {
		pfd, base, err := t.parent(rel, false)
		if err != nil {
			continue // replaced by a later layer
		}
		fd, err := unix.Openat(pfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(pfd)
		if err != nil {
			continue
		}
		err = unix.Fchmod(fd, mode)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("chmod %s: %w", rel, err)
		}
	}
	return nil
}
