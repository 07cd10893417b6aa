package beneath

import (
	"errors"
	"io"
	"os"
	"sort"

	"github.com/stockade/stockade/internal/fds"
	"golang.org/x/sys/unix"
)

// Entry is a name in a directory and what lstat said of it then. Its Mode
// is 0 when the name was gone by the time it was looked at.
type Entry struct {
	Name string
	Mode uint32 // type and permission bits (unix.S_IFMT ...)
	Size int64
	Ctim unix.Timespec
}

// Type is the entry's type bits: unix.S_IFREG, S_IFDIR, S_IFLNK ...
func (e Entry) Type() uint32 { return e.Mode & unix.S_IFMT }

// List lists at most max entries of the directory rel below dirfd (opened
// as OpenDir does), sorted by name; more says there were others. It reads
// in chunks: a directory of a million entries is never held whole.
func List(dirfd int, rel string, max int) (entries []Entry, more bool, err error) {
	if max <= 0 {
		return []Entry{}, true, nil
	}
	fd, err := OpenDir(dirfd, rel)
	if err != nil {
		return nil, false, err
	}
	return list(fd, rel, max)
}

// list lists the directory fd (closed here), as List does.
func list(fd int, rel string, max int) ([]Entry, bool, error) {
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	entries := []Entry{}
	for len(entries) < max {
		names, err := f.Readdirnames(min(256, max-len(entries)))
		for _, n := range names {
			entries = append(entries, lstat(fd, n))
		}
		if errors.Is(err, io.EOF) {
			return sorted(entries), false, nil
		}
		if err != nil {
			return nil, false, err
		}
	}
	// One more name says whether there were more.
	extra, _ := f.Readdirnames(1)
	return sorted(entries), len(extra) > 0, nil
}

func sorted(entries []Entry) []Entry {
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name < entries[j].Name })
	return entries
}

func lstat(dirfd int, name string) Entry {
	e := Entry{Name: name}
	var st unix.Stat_t
	if unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
		e.Mode, e.Size, e.Ctim = st.Mode, st.Size, st.Ctim
	}
	return e
}

// Step is what a walk does after visiting an entry.
type Step int

const (
	Next    Step = iota // on to the next entry (into a directory: not)
	Descend             // into this directory, then on
	Stop                // no further
)

// Walk is a walk of the tree below a directory: depth first, each
// directory's entries in name order, each directory opened beneath the one
// before it (never through a symlink, so one swapped in for a directory
// mid-walk is refused, not followed). It looks at MaxEntries entries at
// most in all (directories held while below them included), so a tree of
// a million names costs that many calls at most.
type Walk struct {
	MaxEntries int
	// Visit is told each entry, by its path from the top ("a/b") and its
	// depth (0: an entry of the top directory), and says what next.
	Visit func(p string, depth int, e Entry) Step
	// Failed is told a directory (its path, "." for the top) that could
	// not be opened or listed, and says what next (Next: skip it).
	Failed func(dir string, err error) Step
	// Cut is told each directory the MaxEntries cap left entries of
	// unlisted (and so unvisited); the walk visits what it listed.
	Cut func(dir string)

	seen int
}

// Run walks the tree below dirfd. It reports whether a Stop ended it.
func (w *Walk) Run(dirfd int) bool {
	fd, err := OpenDir(dirfd, ".")
	if err != nil {
		return w.Failed(".", err) == Stop
	}
	return w.dir(fd, "", 0)
}

// dir walks the directory fd (closed here), whose path is prefix ("" for
// the top, else ending in "/"), depth levels down.
func (w *Walk) dir(fd int, prefix string, depth int) (stopped bool) {
	name := prefix
	if name == "" {
		name = "."
	} else {
		name = name[:len(name)-1]
	}
	sub, err := fds.Dup(fd) // for the subdirectories' opens; list closes fd
	if err != nil {
		unix.Close(fd)
		return w.Failed(name, err) == Stop
	}
	defer unix.Close(sub)
	entries, more, err := list(fd, name, w.MaxEntries-w.seen)
	if err != nil {
		return w.Failed(name, err) == Stop
	}
	w.seen += len(entries)
	if more {
		w.Cut(name)
	}
	for _, e := range entries {
		switch w.Visit(prefix+e.Name, depth, e) {
		case Stop:
			return true
		case Descend:
			next, err := OpenDir(sub, e.Name)
			if err != nil {
				if w.Failed(prefix+e.Name, err) == Stop {
					return true
				}
				continue
			}
			if w.dir(next, prefix+e.Name+"/", depth+1) {
				return true
			}
		}
	}
	return false
}
