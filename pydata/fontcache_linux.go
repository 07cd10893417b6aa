package pydata

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/stockade/stockade/internal/lockfile"
	"github.com/stockade/stockade/internal/runlock"
	"golang.org/x/sys/unix"
)

// MPLConfigDir is matplotlib's config and cache directory in the jail
// (MPLCONFIGDIR): writable, on the jail's /tmp.
const MPLConfigDir = "/tmp/matplotlib"

// FontCacheDir is where the stored cache is bound read-only in the jail.
const FontCacheDir = "/run/stockade/matplotlib"

// packageDirs are where a root's python3 finds matplotlib: Debian's
// package, then pip's. The first match is the one Python imports.
var packageDirs = []string{
	"/usr/local/lib/python3*/dist-packages/matplotlib",
	"/usr/lib/python3/dist-packages/matplotlib",
	"/usr/lib/python3*/site-packages/matplotlib",
	"/usr/local/lib/python3*/site-packages/matplotlib",
}

// fontDirs are what fontconfig and matplotlib search for fonts: a change
// below them (a font installed or removed) changes the key.
var fontDirs = []string{"/usr/share/fonts", "/usr/local/share/fonts", "/etc/fonts"}

// maxFontDirs bounds the walk of the font directories, which happens on
// every run.
const maxFontDirs = 4096

// fontCacheKey names the cache a root needs: its Python (the interpreter python3
// resolves to), its matplotlib and its fonts, each identified by path, size
// and modification time, so an upgrade of any of them (a new file) gives a
// new key. ok is false when the root has no matplotlib. root is "/" for the
// host-derived root or a prepared root directory.
func fontCacheKey(root string) (key string, ok bool, err error) {
	var mpl string
	for _, pat := range packageDirs {
		m, _ := filepath.Glob(filepath.Join(root, pat, "__init__.py"))
		if len(m) > 0 {
			sort.Strings(m)
			mpl = m[len(m)-1]
			break
		}
	}
	if mpl == "" {
		return "", false, nil
	}
	h := sha256.New()
	fact := func(p string, fi fs.FileInfo) {
		fmt.Fprintf(h, "%s %d %d %v\n", p, fi.Size(), fi.ModTime().UnixNano(), fi.Mode())
	}
	py, err := resolve(root, "/usr/bin/python3")
	if err != nil {
		return "", false, fmt.Errorf("find python3 in %s: %w", root, err)
	}
	for _, p := range []string{py, mpl} {
		fi, err := os.Stat(p)
		if err != nil {
			return "", false, err
		}
		fact(p, fi)
	}
	n := 0
	for _, d := range fontDirs {
		err := filepath.WalkDir(filepath.Join(root, d), func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return nil // a missing or unreadable directory is a fact too: absent
			}
			if n++; n > maxFontDirs {
				return filepath.SkipAll
			}
			if !e.IsDir() && e.Type()&fs.ModeSymlink == 0 {
				return nil
			}
			if fi, err := e.Info(); err == nil {
				fact(p, fi)
			}
			return nil
		})
		if err != nil {
			return "", false, err
		}
	}
	return filepath.Base(py) + "-" + hex.EncodeToString(h.Sum(nil))[:20], true, nil
}

// resolve follows the symlinks of p inside root (python3 -> python3.11),
// as the jail would see them.
func resolve(root, p string) (string, error) {
	for i := 0; i < 16; i++ {
		full := filepath.Join(root, p)
		target, err := os.Readlink(full)
		if errors.Is(err, unix.EINVAL) {
			return full, nil
		}
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			p = target
		} else {
			p = filepath.Join(filepath.Dir(p), target)
		}
	}
	return "", fmt.Errorf("%s: too many symlinks", p)
}

// rootFontCacheDir is where host root's caches live.
const rootFontCacheDir = "/var/cache/stockade/matplotlib"

// userFontCacheDir is where a user's caches live: $XDG_CACHE_HOME/stockade/
// matplotlib, else ~/.cache/stockade/matplotlib when the home directory is
// a directory of theirs; "" otherwise (a system account whose home is
// /nonexistent or someone else's, as for cron jobs and systemd units),
// for the caller to choose a directory of its own.
func userFontCacheDir() string {
	if x := os.Getenv("XDG_CACHE_HOME"); filepath.IsAbs(x) {
		return filepath.Join(x, "stockade", "matplotlib")
	}
	home := os.Getenv("HOME")
	var st unix.Stat_t
	if !filepath.IsAbs(home) || unix.Stat(home, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() {
		return ""
	}
	return filepath.Join(home, ".cache", "stockade", "matplotlib")
}

// fileName reports whether name is what matplotlib calls its font cache:
// fontlist-v330.json for 3.6, the number being the cache format's
// version (`^fontlist-v[0-9]{1,6}\.json$`). A loop, not a regexp: every run
// with matplotlib in its root looks the cache up, and compiling the regexp
// ({1,6} is six copies) was a twentieth of a millisecond of each start.
func fileName(name string) bool {
	digits, ok := strings.CutPrefix(name, "fontlist-v")
	if !ok {
		return false
	}
	digits, ok = strings.CutSuffix(digits, ".json")
	if !ok || len(digits) < 1 || len(digits) > 6 {
		return false
	}
	for _, c := range []byte(digits) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// maxFile bounds one cache file: matplotlib's is about 30 KiB for the
// fonts of a desktop; tens of thousands of fonts stay far below this.
const maxFile = 16 << 20

// lookupFontCache returns the files of the cache stored for key in base, or ok false
// when there is none. A cache that is not a directory owned by this user and
// writable by nobody else, holding only such regular files, is an error:
// something else wrote it, and it is not bound into any jail.
func lookupFontCache(base, key string) (files []string, ok bool, err error) {
	dir := filepath.Join(base, key)
	if err := checkOwned(base, true); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, false, nil
		}
		return nil, false, err
	}
	if err := checkOwned(dir, true); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, false, nil
		}
		return nil, false, err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, false, err
	}
	for _, e := range ents {
		if !fileName(e.Name()) {
			return nil, false, fmt.Errorf("font cache %s: unexpected entry %s", dir, e.Name())
		}
		if err := checkOwned(filepath.Join(dir, e.Name()), false); err != nil {
			return nil, false, err
		}
		files = append(files, e.Name())
	}
	if len(files) == 0 {
		return nil, false, fmt.Errorf("font cache %s: empty", dir)
	}
	sort.Strings(files)
	return files, true, nil
}

func checkOwned(p string, dir bool) error {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return &fs.PathError{Op: "lstat", Path: p, Err: err}
	}
	want := uint32(unix.S_IFREG)
	if dir {
		want = unix.S_IFDIR
	}
	if !runlock.OwnedOnly(&st, want) {
		return fmt.Errorf("font cache %s: not a %s owned by uid %d and writable only by it",
			p, map[bool]string{true: "directory", false: "file"}[dir], os.Geteuid())
	}
	return nil
}

// parseFontCache checks what the builder printed: a JSON object of cache file names
// to their contents, each a matplotlib font list (a JSON object).
func parseFontCache(out []byte) (map[string][]byte, error) {
	var m map[string]string
	if err := json.Unmarshal(out, &m); err != nil {
		return nil, fmt.Errorf("builder output: %w", err)
	}
	if len(m) == 0 {
		return nil, errors.New("builder output: matplotlib wrote no font cache")
	}
	files := map[string][]byte{}
	for name, data := range m {
		if !fileName(name) {
			return nil, fmt.Errorf("builder output: unexpected file name %q", name)
		}
		var list map[string]any
		if len(data) > maxFile || json.Unmarshal([]byte(data), &list) != nil {
			return nil, fmt.Errorf("builder output: %s is not a font list", name)
		}
		files[name] = []byte(data)
	}
	return files, nil
}

// storeFontCache writes files as the cache for key in base, all at once: into a
// fresh directory first, renamed into place, so a jail never sees half a
// cache, and a concurrent Store of the same key leaves one whole copy.
func storeFontCache(base, key string, files map[string][]byte) error {
	if err := os.MkdirAll(base, 0o755); err != nil {
		return fmt.Errorf("font cache %s: %w", base, err)
	}
	if err := checkOwned(base, true); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(base, ".new-")
	if err != nil {
		return fmt.Errorf("font cache %s: %w", base, err)
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(tmp, name), data, 0o644); err != nil {
			return fmt.Errorf("font cache %s: %w", tmp, err)
		}
	}
	err = os.Rename(tmp, filepath.Join(base, key))
	if errors.Is(err, fs.ErrExist) || errors.Is(err, unix.ENOTEMPTY) {
		return nil // a concurrent build got there first
	}
	if err != nil {
		return fmt.Errorf("font cache %s: %w", base, err)
	}
	return nil
}

// lockName is the base's lock file. Not the base itself: that is 0755,
// for every jail user to read the cache bound from it, and anyone who can
// open a file can flock it; a lock another user held kept every run that
// had to build waiting, without end and before its jail started.
const lockName = ".lock"

// lockFontCache takes the base's lock, so that concurrent first runs build once:
// the others wait and then find the cache. Only this user can open the
// lock file (0600 in a directory only this user writes), so only its own
// builds, each bounded by the builder's timeout, are ever waited for. The
// returned function releases it.
func lockFontCache(base string) (func(), error) {
	if err := os.MkdirAll(base, 0o755); err != nil {
		return nil, fmt.Errorf("font cache %s: %w", base, err)
	}
	if err := checkOwned(base, true); err != nil {
		return nil, err
	}
	unlock, err := lockfile.Acquire(filepath.Join(base, lockName))
	if err != nil {
		return nil, fmt.Errorf("font cache: %w", err)
	}
	return unlock, nil
}

// fontCacheScript is the Python the builder runs in a jail with MPLCONFIGDIR
// set to an empty writable directory: importing font_manager builds and
// writes the cache there; the script prints {name: content} of what it
// wrote.
const fontCacheScript = `import json, os, sys
import matplotlib.font_manager
d = os.environ["MPLCONFIGDIR"]
json.dump({n: open(os.path.join(d, n)).read() for n in os.listdir(d)
           if n.startswith("fontlist-") and n.endswith(".json")}, sys.stdout)
`
