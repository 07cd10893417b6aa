package rootfs

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// maxSymlinks is the kernel's limit on symlinks in one lookup (ELOOP).
const maxSymlinks = 40

// resolveIn resolves the absolute jail path p inside root the way the
// kernel would if root were /: symlinks are followed, absolute ones from
// root, and ".." stops at root. It returns the resolved jail path and the
// host path of what it names; the file must exist.
func resolveIn(root, p string) (jailPath, hostPath string, err error) {
	rest := strings.Split(p, "/")
	cur := "/"
	links := 0
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = path.Dir(cur)
			continue
		}
		next := path.Join(cur, c)
		fi, err := os.Lstat(filepath.Join(root, filepath.FromSlash(next)))
		if err != nil {
			return "", "", fmt.Errorf("%s: %w", next, unwrapPathError(err))
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			if links++; links > maxSymlinks {
				return "", "", fmt.Errorf("%s: too many levels of symbolic links", p)
			}
			target, err := os.Readlink(filepath.Join(root, filepath.FromSlash(next)))
			if err != nil {
				return "", "", fmt.Errorf("%s: %w", next, unwrapPathError(err))
			}
			if path.IsAbs(target) {
				cur = "/"
			}
			rest = append(strings.Split(target, "/"), rest...)
			continue
		}
		if !fi.IsDir() && len(rest) > 0 && strings.Trim(strings.Join(rest, ""), "/.") != "" {
			return "", "", fmt.Errorf("%s: not a directory", next)
		}
		cur = next
	}
	return cur, filepath.Join(root, filepath.FromSlash(cur)), nil
}

// unwrapPathError drops the host path from an *fs.PathError, which would
// otherwise repeat the root directory in every message.
func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
