package jail

import (
	"errors"
	"fmt"
	"time"

	"github.com/stockade/stockade/internal/beneath"
	"golang.org/x/sys/unix"
)

// commit applies changes to the host directory host (rel below DIR) in
// order. Every step is a rename between DIR and the staging directory, or
// a chmod, and marks its change applied; a failure returns at once, and
// undo then takes back what was applied. The host may still be changing
// DIR: an entry it changed since the plan is a conflict, as during the
// run.
func (c *copier) commit(host int, changes []*change, rel string) error {
	for _, ch := range changes {
		if err := c.apply(host, ch, join(rel, ch.name)); err != nil {
			return err
		}
	}
	return nil
}

func (c *copier) apply(host int, ch *change, rel string) error {
	if !c.lim.deadline.IsZero() && time.Now().After(c.lim.deadline) {
		return c.pastDeadline()
	}
	switch ch.kind {
	case changeMerge:
		sub, err := c.openPlanned(host, ch, rel)
		if err != nil {
			return err
		}
		defer unix.Close(sub)
		ch.applied = true
		if err := c.commit(sub, ch.kids, rel); err != nil {
			return err
		}
		return c.setMode(sub, ch, rel)
	case changeRemove, changeClear:
		_, err := c.removeInto(host, ch, rel)
		return err
	}
	if ch.removeFirst {
		all, err := c.removeInto(host, ch, rel)
		if err != nil {
			return err
		}
		if !all {
			c.conflicts.add(rel, "the jail made it anew; what the host has there stays, so the jail's was not copied back")
			return nil
		}
	}
	if ch.replaces != 0 {
		// The plan found the host's entry unchanged; look again, then swap
		// the two atomically (the old one lands in the staging
		// directory, for undo or removal).
		h, err := c.statHost(host, ch.name)
		if err != nil {
			return fmt.Errorf("stat %s: %w", shortPath(rel), err)
		}
		if !h.exists || h.ino != ch.replaces || h.changed || h.mount {
			c.conflicts.add(rel, "the jail changed it, the host changed it while copying back: kept")
			return nil
		}
		if err := unix.Renameat2(c.stage, ch.staged, host, ch.name, unix.RENAME_EXCHANGE); err != nil {
			return fmt.Errorf("replace %s: %w", shortPath(rel), err)
		}
		// Whoever can write this directory may have put another entry at
		// the name since the look: what came out must be the one looked at.
		var out unix.Stat_t
		if err := unix.Fstatat(c.stage, ch.staged, &out, unix.AT_SYMLINK_NOFOLLOW); err != nil || out.Ino != ch.replaces {
			if err := unix.Renameat2(c.stage, ch.staged, host, ch.name, unix.RENAME_EXCHANGE); err != nil {
				return fmt.Errorf("replace %s: the host replaced it meanwhile, and exchanging it back failed: %w", shortPath(rel), err)
			}
			c.conflicts.add(rel, "the jail changed it, the host changed it while copying back: kept")
			return nil
		}
	} else {
		var err error
		if ch.linkFrom != "" {
			err = unix.Linkat(c.stage, ch.linkFrom, host, ch.name, 0)
		} else {
			err = unix.Renameat2(c.stage, ch.staged, host, ch.name, unix.RENAME_NOREPLACE)
		}
		if errors.Is(err, unix.EEXIST) {
			c.conflicts.add(rel, "the host made it while copying back: kept")
			return nil
		}
		if err != nil {
			return fmt.Errorf("put %s: %w", shortPath(rel), err)
		}
	}
	ch.applied = true
	c.report.Files++
	c.report.Bytes += ch.bytes
	if !ch.dir {
		return nil
	}
	sub, err := c.openPlanned(host, ch, rel)
	if err != nil {
		return err
	}
	defer unix.Close(sub)
	if err := c.commit(sub, ch.kids, rel); err != nil {
		return err
	}
	return c.setMode(sub, ch, rel)
}

// openPlanned opens the directory ch names in host, and only the one the
// plan saw (a merge) or staged (a put): whoever can write host can swap
// its names (a rename in one directory needs no right on what moves), and
// the plan's changes, deletions included, are for that directory alone.
func (c *copier) openPlanned(host int, ch *change, rel string) (int, error) {
	sub, err := beneath.OpenDirSameMount(host, ch.name)
	if err != nil {
		return -1, fmt.Errorf("open %s: %s (changed while copying back)", shortPath(rel), whyNotOpened(host, ch.name, err))
	}
	if same, err := isIno(sub, ch.ino); err != nil || !same {
		unix.Close(sub)
		return -1, fmt.Errorf("open %s: another directory now (replaced while copying back)", shortPath(rel))
	}
	return sub, nil
}

// setMode gives a directory its mode once its entries are in.
func (c *copier) setMode(fd int, ch *change, rel string) error {
	if ch.mode == keepMode {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat %s: %w", shortPath(rel), err)
	}
	if err := unix.Fchmod(fd, ch.mode); err != nil {
		return fmt.Errorf("chmod %s: %w", shortPath(rel), err)
	}
	ch.oldMode, ch.modeSet = st.Mode&0o7777, true
	return nil
}

// removeInto moves what the jail deleted out of DIR, into a mirror
// directory in the staging area (ch.trash), as far as it is as the run
// found it: the entry ch names in host, or for a clear the entries of
// host (the directory itself) not in ch.keep. all reports whether all of
// it went.
func (c *copier) removeInto(host int, ch *change, rel string) (all bool, err error) {
	trash, err := c.newName()
	if err != nil {
		return false, err
	}
	if err := unix.Mkdirat(c.stage, trash, 0o700); err != nil {
		return false, fmt.Errorf("make a directory in the staging area: %w", err)
	}
	ch.trash = trash
	mirror, err := beneath.OpenDirSameMount(c.stage, trash)
	if err != nil {
		return false, fmt.Errorf("open a directory in the staging area: %w", err)
	}
	defer unix.Close(mirror)
	if ch.kind != changeClear {
		return c.removeEntry(host, ch.name, mirror, rel, 0)
	}
	names, err := beneath.Names(host)
	if err != nil {
		return false, fmt.Errorf("read %s: %w", shortPath(rel), err)
	}
	all = true
	for _, n := range names {
		if ch.keep[n] {
			continue
		}
		ok, err := c.removeEntry(host, n, mirror, join(rel, n), 0)
		if err != nil {
			return false, err
		}
		all = all && ok
	}
	return all, nil
}

// removeEntry moves name of host into the mirror directory, the same
// name, a directory entry by entry: an entry the host made or changed
// during the run stays, and so does a mount point, with the directories
// above it. A directory the host changed stays whole: what is in it may
// have been moved there from anywhere (its own ctime changed, its entries'
// did not), and nothing says which of its entries were there when the
// run began. all reports whether name went.
func (c *copier) removeEntry(host int, name string, mirror int, rel string, depth int) (all bool, err error) {
	if err := c.look(); err != nil {
		return false, err
	}
	h, err := c.statHost(host, name)
	if err != nil {
		return false, fmt.Errorf("stat %s: %w", shortPath(rel), err)
	}
	if !h.exists {
		return true, nil
	}
	if c.keptHost(h, rel, "the jail deleted it") {
		return false, nil
	}
	if !h.dir {
		if err := unix.Renameat2(host, name, mirror, name, unix.RENAME_NOREPLACE); err != nil {
			return false, fmt.Errorf("remove %s: %w", shortPath(rel), err)
		}
		// The name may have been given to another entry since the look.
		var moved unix.Stat_t
		if err := unix.Fstatat(mirror, name, &moved, unix.AT_SYMLINK_NOFOLLOW); err != nil || moved.Ino != h.ino {
			if err := unix.Renameat2(mirror, name, host, name, unix.RENAME_NOREPLACE); err != nil {
				return false, fmt.Errorf("remove %s: the host replaced it meanwhile, and putting it back failed: %w", shortPath(rel), err)
			}
			c.conflicts.add(rel, "the jail deleted it, the host replaced it while copying back: kept")
			return false, nil
		}
		c.report.Deleted++
		return true, nil
	}
	if depth >= maxCopyDepth {
		c.conflicts.add(rel, fmt.Sprintf("the jail deleted it, but it goes deeper than %d levels: kept", maxCopyDepth))
		return false, nil
	}
	sub, err := beneath.OpenDirSameMount(host, name)
	if err != nil {
		c.conflicts.add(rel, "the jail deleted it, but it is "+whyNotOpened(host, name, err)+": kept")
		return false, nil
	}
	defer unix.Close(sub)
	if same, err := isIno(sub, h.ino); err != nil || !same {
		c.conflicts.add(rel, "the jail deleted it, the host replaced it while copying back: kept")
		return false, nil
	}
	if err := unix.Mkdirat(mirror, name, 0o700); err != nil {
		return false, fmt.Errorf("make a directory in the staging area: %w", err)
	}
	subMirror, err := beneath.OpenDirSameMount(mirror, name)
	if err != nil {
		return false, fmt.Errorf("open a directory in the staging area: %w", err)
	}
	defer unix.Close(subMirror)
	names, err := beneath.Names(sub)
	if err != nil {
		return false, fmt.Errorf("read %s: %w", shortPath(rel), err)
	}
	all = true
	for _, n := range names {
		ok, err := c.removeEntry(sub, n, subMirror, join(rel, n), depth+1)
		if err != nil {
			return false, err
		}
		all = all && ok
	}
	if !all {
		return false, nil
	}
	// The mirror keeps the directory's owner and mode, for undo to make
	// it again.
	if c.uid >= 0 {
		if err := unix.Fchown(subMirror, int(h.uid), int(h.gid)); err != nil {
			return false, fmt.Errorf("record %s: %w", shortPath(rel), err)
		}
	}
	if err := unix.Fchmod(subMirror, h.mode&0o7777); err != nil {
		return false, fmt.Errorf("record %s: %w", shortPath(rel), err)
	}
	// rmdir, not a rename: it fails on an entry the host added since.
	err = unix.Unlinkat(host, name, unix.AT_REMOVEDIR)
	if errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
		c.conflicts.add(rel, "the jail deleted it, the host added to it while copying back: kept")
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("remove %s: %w", shortPath(rel), err)
	}
	c.report.Deleted++
	return true, nil
}

// undo takes back, in reverse order, what commit applied of changes in
// host, and returns what it could not.
func (c *copier) undo(host int, changes []*change, rel string) error {
	var errs []error
	for i := len(changes) - 1; i >= 0; i-- {
		ch := changes[i]
		if err := c.undoOne(host, ch, join(rel, ch.name)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (c *copier) undoOne(host int, ch *change, rel string) error {
	var errs []error
	if ch.applied && (ch.kind == changeMerge || ch.dir) {
		sub, err := c.openPlanned(host, ch, rel)
		if err != nil {
			return err
		}
		if ch.modeSet {
			if err := unix.Fchmod(sub, ch.oldMode); err != nil {
				errs = append(errs, fmt.Errorf("chmod %s back: %w", shortPath(rel), err))
			}
		}
		errs = append(errs, c.undo(sub, ch.kids, rel))
		unix.Close(sub)
	}
	if ch.applied && ch.linkFrom != "" {
		// Unlink the name we linked, if it is still ours.
		var ours, there unix.Stat_t
		err := unix.Fstatat(c.stage, ch.linkFrom, &ours, unix.AT_SYMLINK_NOFOLLOW)
		if err == nil {
			err = unix.Fstatat(host, ch.name, &there, unix.AT_SYMLINK_NOFOLLOW)
		}
		if err == nil && ours.Ino == there.Ino && ours.Dev == there.Dev {
			err = unix.Unlinkat(host, ch.name, 0)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("take %s back: %w", shortPath(rel), err))
		}
	} else if ch.applied && ch.kind == changePut {
		flags := uint(unix.RENAME_NOREPLACE)
		if ch.replaces != 0 {
			flags = unix.RENAME_EXCHANGE
		}
		if err := unix.Renameat2(host, ch.name, c.stage, ch.staged, flags); err != nil {
			errs = append(errs, fmt.Errorf("take %s back: %w", shortPath(rel), err))
		}
	}
	if ch.trash != "" {
		errs = append(errs, c.restore(host, ch.trash, rel))
	}
	return errors.Join(errs...)
}

// restore moves what removeInto moved into the mirror trash back into
// host.
func (c *copier) restore(host int, trash, rel string) error {
	mirror, err := beneath.OpenDirSameMount(c.stage, trash)
	if err != nil {
		return fmt.Errorf("open the staging area's copy of %s: %w", shortPath(rel), err)
	}
	defer unix.Close(mirror)
	return c.restoreDir(host, mirror, rel, 0)
}

func (c *copier) restoreDir(host, mirror int, rel string, depth int) error {
	names, err := beneath.Names(mirror)
	if err != nil {
		return fmt.Errorf("read the staging area's copy of %s: %w", shortPath(rel), err)
	}
	var errs []error
	for _, n := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(mirror, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			errs = append(errs, err)
			continue
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			if err := unix.Renameat2(mirror, n, host, n, unix.RENAME_NOREPLACE); err != nil {
				errs = append(errs, fmt.Errorf("put %s back: %w", shortPath(join(rel, n)), err))
			}
			continue
		}
		// A directory removal took is made again with the owner and mode
		// its mirror kept; one it left is there still.
		made := unix.Mkdirat(host, n, 0o700) == nil
		sub, err := beneath.OpenDirSameMount(host, n)
		if err != nil {
			errs = append(errs, fmt.Errorf("open %s: %w", shortPath(join(rel, n)), err))
			continue
		}
		subMirror, err := beneath.OpenDirSameMount(mirror, n)
		if err == nil {
			// Its mode is the removed directory's, perhaps read-only.
			err = unix.Fchmod(subMirror, 0o700)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("open the staging area's copy of %s: %w", shortPath(join(rel, n)), err))
		} else if depth < maxCopyDepth {
			errs = append(errs, c.restoreDir(sub, subMirror, join(rel, n), depth+1))
			unix.Close(subMirror)
		}
		if made {
			if c.uid >= 0 {
				if err := unix.Fchown(sub, int(st.Uid), int(st.Gid)); err != nil {
					errs = append(errs, err)
				}
			}
			if err := unix.Fchmod(sub, st.Mode&0o7777); err != nil {
				errs = append(errs, err)
			}
		}
		unix.Close(sub)
	}
	return errors.Join(errs...)
}
