package image

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// trimmed are directories whose contents a jail never needs: package
// caches and lists (the root is read-only, apt never runs in it), manuals,
// and logs of the build. Their directories stay, empty.
var trimmed = []string{
	"var/cache",
	"var/lib/apt/lists",
	"var/log",
	"usr/share/doc",
	"usr/share/man",
	"usr/share/info",
	"usr/share/lintian",
	"usr/share/locale", // message catalogs; see localeKeep
	"usr/lib/locale",   // compiled locales; see localeKeep
	// The jail mounts its own /dev, /proc and /tmp; what debootstrap left
	// there (device nodes, a stale mount point's files) has no use.
	"dev",
	"proc",
	"tmp",
	"var/tmp",
}

// localeKeep are the names kept in the locale directories: C.UTF-8, the
// jail's LANG, and the alias table glibc reads.
var localeKeep = map[string][]string{
	"usr/lib/locale":   {"C.utf8", "C.UTF-8"},
	"usr/share/locale": {"locale.alias"},
}

// emptyDirs are the mount points the jail uses, created if missing.
var emptyDirs = []struct {
	name string
	mode fs.FileMode
}{
	{"work", 0o755},
	{"tmp", 0o777 | fs.ModeSticky},
	{"proc", 0o555},
	{"dev", 0o755},
}

// finish makes a freshly bootstrapped tree at dir fit to be a jail root:
// trimmed, with the jail's identity files, its mount points, and no
// setuid, setgid or file-capability bits. It never follows a symlink out of
// a path it cleans: a tree whose usr/share/doc is a symlink keeps the link
// and what it points to. dir must have nothing mounted below it.
func finish(dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer root.Close()
	for _, rel := range trimmed {
		if err := clearDir(root, rel, localeKeep[rel]); err != nil {
			return err
		}
	}
	for name, content := range identityFiles() {
		mode := fs.FileMode(0o644)
		if strings.Contains(name, "shadow") {
			mode = 0o600
		}
		if err := writeFileIn(root, name, content, mode); err != nil {
			return err
		}
	}
	for _, d := range emptyDirs {
		if !isRealDir(root, d.name) {
			// A file or symlink where a mount point goes: replace it.
			if err := root.RemoveAll(d.name); err != nil {
				return fmt.Errorf("replace %s: %w", filepath.Join(dir, d.name), err)
			}
		}
		if err := root.Mkdir(d.name, d.mode.Perm()); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("mkdir %s: %w", filepath.Join(dir, d.name), err)
		}
		if err := root.Chmod(d.name, d.mode); err != nil {
			return fmt.Errorf("chmod %s: %w", filepath.Join(dir, d.name), err)
		}
	}
	return stripPrivileges(dir, root)
}

// clearDir removes everything in rel but the names in keep. A rel that is
// missing, or that is reached through a symlink, is left alone.
func clearDir(root *os.Root, rel string, keep []string) error {
	if !isRealDir(root, rel) {
		return nil
	}
	f, err := root.Open(rel)
	if err != nil {
		return fmt.Errorf("trim %s: %w", rel, err)
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return fmt.Errorf("trim %s: %w", rel, err)
	}
	for _, n := range names {
		if slices.Contains(keep, n) {
			continue
		}
		// RemoveAll does not follow a symlink it removes, and Root keeps it
		// inside the tree.
		if err := root.RemoveAll(path.Join(rel, n)); err != nil {
			return fmt.Errorf("trim %s: %w", path.Join(rel, n), err)
		}
	}
	return nil
}

// isRealDir reports whether rel and each directory on the way to it is a
// directory, not a symlink to one.
func isRealDir(root *os.Root, rel string) bool {
	parts := strings.Split(rel, "/")
	for i := range parts {
		fi, err := root.Lstat(path.Join(parts[:i+1]...))
		if err != nil || !fi.IsDir() {
			return false
		}
	}
	return true
}

// writeFileIn replaces name with content: an existing file, or a symlink
// planted where it goes, is removed first rather than written through.
func writeFileIn(root *os.Root, name, content string, mode fs.FileMode) error {
	if !isRealDir(root, path.Dir(name)) {
		return fmt.Errorf("write %s: %s is not a directory", name, path.Dir(name))
	}
	if err := root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("write %s: %w", name, err)
	}
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if _, err := f.WriteString(content); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := f.Chmod(mode); err != nil { // past the umask
		f.Close()
		return fmt.Errorf("write %s: %w", name, err)
	}
	return f.Close()
}

// stripPrivileges clears setuid and setgid bits and drops file capabilities
// (the security.capability xattr) everywhere in the tree. The jail mounts
// the root nosuid and sets no_new_privs, so these are dead weight there;
// clearing them means the tree is harmless even if mounted some other way.
func stripPrivileges(dir string, root *os.Root) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil // WalkDir does not follow symlinks; devices were trimmed
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
			if err := root.Chmod(rel, fi.Mode().Perm()); err != nil {
				return fmt.Errorf("clear setuid on %s: %w", p, err)
			}
		}
		err = unix.Lremovexattr(p, "security.capability")
		if err != nil && !errors.Is(err, unix.ENODATA) && !errors.Is(err, unix.ENOTSUP) {
			return fmt.Errorf("drop file capabilities of %s: %w", p, err)
		}
		return nil
	})
}
