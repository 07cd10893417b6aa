package vmtier

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// checkRel refuses a file's path that is not a clean relative path below
// the tree: the other side of the channel wrote it.
func checkRel(p string) error {
	if p == "" || path.IsAbs(p) || path.Clean(p) != p || p == "." || p == ".." ||
		strings.HasPrefix(p, "../") || strings.IndexByte(p, 0) >= 0 {
		return fmt.Errorf("file path %q: not a clean relative path", p)
	}
	return nil
}

// writeTree writes files below dir (made if missing) through an os.Root,
// so that no path, and no symlink already in dir, leads outside it; what
// it makes belongs to uid and gid (-1: whoever writes).
func writeTree(dir string, files []File, uid, gid int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer r.Close()
	for _, f := range files {
		if err := checkRel(f.Path); err != nil {
			return err
		}
		if d := path.Dir(f.Path); d != "." {
			if err := r.MkdirAll(d, 0o755); err != nil {
				return err
			}
			if uid >= 0 {
				for e := d; e != "."; e = path.Dir(e) {
					if err := r.Lchown(e, uid, gid); err != nil {
						return err
					}
				}
			}
		}
		w, err := r.OpenFile(f.Path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fs.FileMode(f.Mode)&0o755|0o600)
		if err != nil {
			return err
		}
		_, err = w.Write(f.Data)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		if uid >= 0 {
			if err := r.Lchown(f.Path, uid, gid); err != nil {
				return err
			}
		}
	}
	return nil
}

// readTree reads the regular files below dir, at most max bytes of them
// in all; symlinks and special files are left out.
func readTree(dir string, max int64) ([]File, error) {
	var out []File
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if total += fi.Size(); total > max {
			return fmt.Errorf("more than %d bytes", max)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out = append(out, File{Path: filepath.ToSlash(rel), Mode: uint32(fi.Mode().Perm()), Data: b})
		return nil
	})
	return out, err
}
