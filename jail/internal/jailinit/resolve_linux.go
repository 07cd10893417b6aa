package jailinit

import (
	"errors"
	"fmt"
	"strings"

	"github.com/stockade/stockade/internal/beneath"
	"golang.org/x/sys/unix"
)

// OpenNoSymlinks opens an absolute host path as O_PATH without following a
// symlink in any component. Mount sources a user names may sit in a
// directory the jailed code wrote to on an earlier run (--workdir); a
// planted link must not turn "--ro /data/in" into a bind of /etc/shadow.
func OpenNoSymlinks(path string) (int, error) {
	// No O_NOFOLLOW: with O_PATH it would hand back the link itself;
	// RESOLVE_NO_SYMLINKS refuses a trailing link too.
	fd, err := beneath.OpenPath(path, unix.O_PATH)
	if errors.Is(err, unix.ELOOP) {
		return -1, fmt.Errorf("%s: the path contains a symlink (mount sources are not resolved through symlinks; name the real path)", path)
	}
	if err != nil {
		return -1, sourceError(path, err)
	}
	return fd, nil
}

// sourceError explains the usual surprise: init opens mount sources as the
// jail user, an unprivileged host uid, so a path below a root-only
// directory cannot be bound even when stockade runs as root.
func sourceError(path string, err error) error {
	if errors.Is(err, unix.EACCES) {
		return fmt.Errorf("%s: %w (mount sources are opened as the jail user, a host uid of its own from %d up when stockade runs as root: every directory on the path must be searchable by others, o+x)", path, err, HostID)
	}
	return fmt.Errorf("%s: %w", path, err)
}

// openBeneath opens rel below the directory dirfd, refusing symlinks and
// "..": used for every mount target inside the new root.
func openBeneath(dirfd int, rel string, flags uint64) (int, error) {
	// A leading "/" would be an escape to RESOLVE_BENEATH (EXDEV).
	rel = strings.TrimLeft(rel, "/")
	if rel == "" {
		rel = "."
	}
	return beneath.Open(dirfd, rel, flags)
}

// mkdirAllBeneath creates the directories of rel below root, one component
// at a time, never following a symlink, and returns an O_PATH fd of the last.
func mkdirAllBeneath(root int, rel string, mode uint32) (int, error) {
	for _, c := range strings.Split(rel, "/") {
		if c == ".." {
			return -1, fmt.Errorf("%s: '..' in a mount target", rel)
		}
	}
	fd, err := beneath.MkdirAll(root, rel, unix.O_PATH, mode, nil)
	if err != nil {
		return -1, fmt.Errorf("make %s: %w", rel, err)
	}
	return fd, nil
}

// splitDest splits a jail path into its parent and last component.
func splitDest(dest string) (parent, base string) {
	d := strings.Trim(dest, "/")
	i := strings.LastIndexByte(d, '/')
	if i < 0 {
		return "", d
	}
	return d[:i], d[i+1:]
}
