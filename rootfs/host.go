package rootfs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

// Entry is one top-level piece of a jail's root: a read-only bind of a host
// path, or a symlink the jail recreates (for usr-merged layouts such as
// /bin -> usr/bin, and for /etc/localtime).
type Entry struct {
	Path   string // absolute path inside the jail
	Source string // host path to bind read-only; empty for a symlink
	Link   string // symlink target; empty for a bind
	Dir    bool   // the bind's source is a directory (else a file)
}

// hostTop are the host directories a Python needs. Everything else at the
// host's top level (/root, /home, /run with its runtime sockets, /var, the
// caller's working directory, ...) never appears in the jail.
var hostTop = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// hostEtc are the /etc entries a Python and its usual libraries read: the
// loader cache, name-service and protocol tables, certificates, the time
// zone, Debian's alternatives and python config. Never passwd, shadow or
// anything with secrets: the jail generates its own passwd, group and hosts.
//
// The data stack's entries were found by tracing pandas, numpy (OpenBLAS),
// multiprocessing and a matplotlib plot on Debian 12 (strace -e trace=%file)
// and keeping what they open under /etc: numpy and pandas read nothing
// there; matplotlib reads /etc/matplotlibrc (Debian moves the default rc
// file there, and `import matplotlib` fails without it), and fontconfig,
// which matplotlib runs as fc-list to find fonts, reads /etc/fonts (without
// it: "Fontconfig error: Cannot load default config file").
var hostEtc = []string{
	"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
	"/etc/nsswitch.conf", "/etc/host.conf", "/etc/gai.conf",
	"/etc/protocols", "/etc/services", "/etc/mime.types",
	"/etc/localtime", "/etc/timezone",
	"/etc/ssl", "/etc/ca-certificates", "/etc/pki",
	"/etc/alternatives", "/etc/python3", "/etc/python3.11", "/etc/python3.12", "/etc/python3.13",
	"/etc/matplotlibrc", "/etc/fonts",
}

// Host derives the default root from the host at "/".
func Host() ([]Entry, error) {
	return hostEntries("/", append(append([]string{}, hostTop...), hostEtc...))
}

// hostEntries lstats each candidate below root (a prefix for tests) and
// keeps those that exist: directories and files as binds, symlinks as
// symlinks. A symlink is copied, not followed, so the jail resolves it
// against its own root, where /bin -> usr/bin means the jail's /usr.
func hostEntries(root string, candidates []string) ([]Entry, error) {
	var out []Entry
	for _, p := range candidates {
		src := filepath.Join(root, p)
		fi, err := os.Lstat(src)
		if err != nil {
			if os.IsNotExist(err) {
				continue
			}
			return nil, fmt.Errorf("root %s: %w", root, err)
		}
		e, ok, err := entryFor(p, src, fi)
		if err != nil {
			return nil, fmt.Errorf("root %s: %w", root, err)
		}
		if ok {
			out = append(out, e)
		}
	}
	if !hasPath(out, "/usr") {
		return nil, fmt.Errorf("root %s has no /usr directory to run from", root)
	}
	return out, nil
}

func entryFor(jailPath, src string, fi fs.FileInfo) (Entry, bool, error) {
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return Entry{}, false, err
		}
		return Entry{Path: jailPath, Link: target}, true, nil
	case fi.IsDir():
		return Entry{Path: jailPath, Source: src, Dir: true}, true, nil
	case fi.Mode().IsRegular():
		return Entry{Path: jailPath, Source: src}, true, nil
	default:
		// Sockets, fifos and device nodes have no place in a jail's root.
		return Entry{}, false, nil
	}
}

// dirSkip are top-level names of a prepared root that the jail provides
// itself, so they are never bound from the directory.
var dirSkip = map[string]bool{"proc": true, "dev": true, "tmp": true, "work": true, "sys": true, "run": true}

// Dir describes a prepared root directory: every top-level entry except
// those the jail mounts itself. The directory's own /etc is bound whole; the
// jail puts its generated passwd, group and hosts on top where they exist.
func Dir(dir string) ([]Entry, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("rootfs %s: must be an absolute path", dir)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("rootfs %s: %w", dir, err)
	}
	var names []string
	for _, e := range ents {
		if !dirSkip[e.Name()] {
			names = append(names, "/"+e.Name())
		}
	}
	sort.Strings(names)
	return hostEntries(dir, names)
}

func hasPath(es []Entry, p string) bool {
	for _, e := range es {
		if e.Path == p {
			return true
		}
	}
	return false
}
