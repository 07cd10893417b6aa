package jail

import (
	"errors"
	"fmt"

	"github.com/stockade/stockade/internal/beneath"
	"golang.org/x/sys/unix"
)

// change is one thing commit does in a directory of DIR.
type change struct {
	name string
	kind changeKind
	// staged is the put entry's name in the staging directory; or
	// linkFrom names a staged file the put links its name to.
	staged, linkFrom string
	// replaces is the inode of the host entry a put exchanges with (0:
	// none is there); removeFirst says a put first removes the host's
	// directory there, as far as it is unchanged.
	replaces    uint64
	removeFirst bool
	// ino is a directory's inode: the host's for a merge, the staged one's
	// for a put; commit and undo go into no other directory by its name.
	ino   uint64
	dir   bool   // a put of a directory: kids go into it
	mode  uint32 // a directory's mode once its kids are in; keepMode leaves it
	keep  map[string]bool
	kids  []*change
	bytes int64 // data staged for it

	// What commit did, for undo.
	applied bool   // the merge entered, or the put renamed into place
	modeSet bool   // the mode set, oldMode the one before
	oldMode uint32 //
	trash   string // the mirror in the staging directory of what was removed
}

type changeKind uint8

const (
	changeMerge  changeKind = iota // a directory both sides have: kids apply inside it
	changePut                      // the staged entry takes the name
	changeRemove                   // the host entry goes, as far as it is unchanged
	changeClear                    // the host entries not in keep go (an opaque directory)
)

// keepMode is a directory whose mode copy-back leaves as it is.
const keepMode = ^uint32(0)

// hostDir is what the plan knows of a directory of DIR it walks.
type hostDir struct {
	// sure: it is the directory the jail saw at its path, so an entry of
	// it whose ctime predates the run was at its name when the run began.
	// DIR is (its inode is checked). A subdirectory is when its parent
	// is and either did not change during the run: a directory renamed
	// into place has a new ctime, and so has the parent it went into, but
	// the entries inside it keep theirs, and the jail never saw them
	// there.
	sure    bool
	changed bool // made or changed during the run
}

// below is what the plan knows of the subdirectory h of in.
func (in hostDir) below(h hostEntry) hostDir {
	return hostDir{sure: in.sure && (!h.changed || !in.changed), changed: h.changed}
}

// plan walks the upper directory up beside DIR's directory host (-1: the
// jail made it, DIR has none) in name order, stages what the changes write
// and returns them. rel is the directory's path below DIR.
func (c *copier) plan(up, host int, rel string, depth int, in hostDir) ([]*change, error) {
	if depth > maxCopyDepth {
		return nil, &copyStop{fmt.Sprintf("a tree deeper than %d levels", maxCopyDepth)}
	}
	names, err := beneath.Names(up)
	if err != nil {
		return nil, fmt.Errorf("read %s in the upper layer: %w", displayDir(rel), err)
	}
	var out []*change
	for _, name := range names {
		if err := c.look(); err != nil {
			return nil, err
		}
		ch, err := c.planEntry(up, host, name, join(rel, name), depth, in)
		if err != nil {
			return nil, err
		}
		out = append(out, ch...)
	}
	return out, nil
}

// planEntry decides what becomes of one upper entry.
func (c *copier) planEntry(up, host int, name, rel string, depth int, in hostDir) ([]*change, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(up, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, fmt.Errorf("stat %s in the upper layer: %w", shortPath(rel), err)
	}
	var h hostEntry
	if host >= 0 {
		var err error
		if h, err = c.statHost(host, name); err != nil {
			return nil, fmt.Errorf("stat %s: %w", shortPath(rel), err)
		}
	}
	kind := st.Mode & unix.S_IFMT
	if kind == unix.S_IFCHR && st.Rdev == 0 {
		// A whiteout: the jail deleted it.
		if !h.exists || c.keptHost(h, rel, "the jail deleted it") || c.unsure(in, rel, "the jail deleted it") {
			return nil, nil
		}
		return []*change{{name: name, kind: changeRemove}}, nil
	}
	if kind == unix.S_IFDIR && h.exists && h.dir && !h.mount {
		return c.planMerge(up, host, name, rel, st, h, depth, in)
	}
	if h.exists && (c.keptHost(h, rel, "the jail changed it") || c.unsure(in, rel, "the jail changed it")) {
		return nil, nil
	}
	put := &change{name: name, kind: changePut, removeFirst: h.exists && h.dir}
	if h.exists && !h.dir {
		put.replaces = h.ino
	}
	var err error
	switch kind {
	case unix.S_IFDIR:
		// New, or in place of a file of DIR's.
		if put.staged, put.ino, err = c.stageDir(); err != nil {
			return nil, stageError(rel, err)
		}
		put.dir, put.mode = true, st.Mode&0o777
		sub, err := openUpper(up, name)
		if err != nil {
			return nil, fmt.Errorf("open %s in the upper layer: %w", shortPath(rel), err)
		}
		put.kids, err = c.plan(sub, -1, rel, depth+1, hostDir{})
		unix.Close(sub)
		if err != nil {
			return nil, err
		}
	case unix.S_IFREG:
		if err = c.stageFile(put, up, name, &st); err != nil {
			return nil, stageError(rel, err)
		}
	case unix.S_IFLNK:
		target, err := readlinkAt(up, name)
		if err != nil {
			return nil, fmt.Errorf("readlink %s in the upper layer: %w", shortPath(rel), err)
		}
		if !linkStaysInside(rel, target) {
			c.skipped.add(rel, fmt.Sprintf("a symlink to %q, which leads out of DIR: not copied back", shortPath(target)))
			return nil, nil
		}
		if put.staged, err = c.stageLink(target); err != nil {
			return nil, stageError(rel, err)
		}
	default:
		c.skipped.add(rel, "a fifo, socket or device: not copied back")
		return nil, nil
	}
	return []*change{put}, nil
}

// planMerge goes into a directory both sides have.
func (c *copier) planMerge(up, host int, name, rel string, st unix.Stat_t, h hostEntry, depth int, in hostDir) ([]*change, error) {
	hostSub, err := beneath.OpenDirSameMount(host, name)
	if err != nil {
		c.conflicts.add(rel, whyNotOpened(host, name, err)+": the jail's changes below it were not copied back")
		return nil, nil
	}
	defer unix.Close(hostSub)
	if same, err := isIno(hostSub, h.ino); err != nil || !same {
		c.conflicts.add(rel, "replaced while copying back: the jail's changes below it were not copied back")
		return nil, nil
	}
	sub := in.below(h)
	upSub, err := openUpper(up, name)
	if err != nil {
		return nil, fmt.Errorf("open %s in the upper layer: %w", shortPath(rel), err)
	}
	defer unix.Close(upSub)
	m := &change{name: name, kind: changeMerge, mode: keepMode, ino: h.ino}
	if want := st.Mode & 0o777; want != h.mode&0o777 {
		if h.changed || !sub.sure {
			c.conflicts.add(rel, fmt.Sprintf("the jail made its mode %#o, the host changed the directory during the run: mode kept", want))
		} else {
			// The host's own special bits stay; none come from the jail.
			m.mode = h.mode&0o7000 | want
		}
	}
	if opaque(upSub) {
		// The jail removed the directory and made it anew: what the
		// host has in it and the jail's does not, goes.
		if h.changed || !sub.sure {
			c.conflicts.add(rel, "the jail replaced the directory, the host changed it during the run: its entries stay beside the jail's")
		} else {
			names, err := beneath.Names(upSub)
			if err != nil {
				return nil, fmt.Errorf("read %s in the upper layer: %w", shortPath(rel), err)
			}
			// Nameless: it applies to the directory itself.
			m.kids = append(m.kids, &change{kind: changeClear, keep: setOf(names)})
		}
	}
	kids, err := c.plan(upSub, hostSub, rel, depth+1, sub)
	if err != nil {
		return nil, err
	}
	m.kids = append(m.kids, kids...)
	return []*change{m}, nil
}

// keptHost reports (as a conflict) a host entry that the jail's change
// must not touch: a mount point, or one the host made or changed during
// the run.
func (c *copier) keptHost(h hostEntry, rel, what string) bool {
	switch {
	case h.mount:
		c.conflicts.add(rel, what+", but it is a mount point: kept")
	case h.changed && h.dir:
		c.conflicts.add(rel, what+", but the host changed the directory during the run: kept, with all in it")
	case h.changed:
		c.conflicts.add(rel, what+", but the host changed it during the run: kept")
	default:
		return false
	}
	return true
}

// unsure reports (as a conflict) an entry of a directory that may not be
// the one the jail saw at its path: see hostDir.
func (c *copier) unsure(in hostDir, rel, what string) bool {
	if in.sure {
		return false
	}
	c.conflicts.add(rel, what+", but a directory above it was moved or replaced during the run (the jail never saw what is there now): kept")
	return true
}

// isIno reports whether the file fd is the inode ino.
func isIno(fd int, ino uint64) (bool, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, err
	}
	return st.Ino == ino, nil
}

// stageDir makes an empty directory in the staging area (its mode is set
// once its entries are in: a read-only one would refuse them).
func (c *copier) stageDir() (string, uint64, error) {
	if err := c.charge(0, 1); err != nil {
		return "", 0, err
	}
	n, err := c.newName()
	if err != nil {
		return "", 0, err
	}
	if err := unix.Mkdirat(c.stage, n, 0o700); err != nil {
		return "", 0, err
	}
	if c.uid >= 0 {
		if err := unix.Fchownat(c.stage, n, c.uid, c.gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return "", 0, err
		}
	}
	var st unix.Stat_t
	if err := unix.Fstatat(c.stage, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return "", 0, err
	}
	return n, st.Ino, nil
}

// stageFile stages a copy of the upper file name for put: holes stay
// holes, and the names of one hard-linked inode become hard links again
// (a thousand links to one file are one file's data, not a thousand
// copies). Such a file is staged once, as an anchor in the staging
// directory, and each of its names is linked from there: by commit
// straight into its place in DIR, or, to replace an entry of DIR's, to a
// staged name first; either way no path is resolved, however deep the
// names' places in DIR.
func (c *copier) stageFile(put *change, up int, name string, st *unix.Stat_t) error {
	anchor, ok := c.links[st.Ino]
	if !ok {
		n, copied, err := c.stageData(up, name, st)
		if err != nil {
			return err
		}
		if st.Nlink == 1 {
			put.staged, put.bytes = n, copied
			return nil
		}
		anchor = n
		c.links[st.Ino] = n
		put.bytes = copied
	}
	if put.replaces == 0 {
		put.linkFrom = anchor
		return nil
	}
	var err error
	if put.staged, err = c.newName(); err != nil {
		return err
	}
	return unix.Linkat(c.stage, anchor, c.stage, put.staged, 0)
}

// stageData stages the data of the upper file name as a new file.
func (c *copier) stageData(up int, name string, st *unix.Stat_t) (string, int64, error) {
	if err := c.charge(st.Blocks*512, 0); err != nil {
		return "", 0, err
	}
	in, err := unix.Openat(up, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", 0, fmt.Errorf("open in the upper layer: %w", err)
	}
	defer unix.Close(in)
	n, err := c.newName()
	if err != nil {
		return "", 0, err
	}
	out, err := unix.Openat(c.stage, n, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return "", 0, err
	}
	defer unix.Close(out)
	if err := c.own(out, 0o600); err != nil {
		return "", 0, err
	}
	copied, err := copyData(in, out, c.buf, c.lim.deadline)
	if errors.Is(err, errDeadline) {
		return "", 0, c.pastDeadline()
	}
	if err != nil {
		return "", 0, err
	}
	return n, copied, unix.Fchmod(out, st.Mode&0o777)
}

// stageLink stages a symlink, owned as the rest.
func (c *copier) stageLink(target string) (string, error) {
	if err := c.charge(0, 1); err != nil {
		return "", err
	}
	n, err := c.newName()
	if err != nil {
		return "", err
	}
	if err := unix.Symlinkat(target, c.stage, n); err != nil {
		return "", err
	}
	if c.uid >= 0 {
		// In our own staging directory: nobody can swap the name.
		if err := unix.Fchownat(c.stage, n, c.uid, c.gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return "", err
		}
	}
	return n, nil
}

// charge counts what staging takes of the host's disk against
// --work-size: data blocks, and a block for every directory and symlink
// (which the upper tmpfs stores in an inode): filling /work with data and
// then with empty directories would otherwise write twice --work-size.
func (c *copier) charge(bytes, meta int64) error {
	c.disk += bytes
	c.meta += meta
	if cost := c.disk + c.meta*hostBlock; c.lim.diskBytes > 0 && cost > c.lim.diskBytes {
		return &copyStop{fmt.Sprintf("the changes would take more than %d bytes of the host's disk (%d of data, %d directories and symlinks at %d bytes each so far), more than --work-size %d",
			c.lim.diskBytes, c.disk, c.meta, hostBlock, c.lim.diskBytes)}
	}
	return nil
}

// stageError names the entry a staging step failed on, unless it is a
// limit (which names itself).
func stageError(rel string, err error) error {
	var stop *copyStop
	if errors.As(err, &stop) {
		return err
	}
	return fmt.Errorf("stage %s: %w", shortPath(rel), err)
}

func displayDir(rel string) string {
	if rel == "" {
		return "DIR"
	}
	return shortPath(rel)
}

func setOf(names []string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}
