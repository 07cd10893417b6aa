package jail

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/stockade/stockade/internal/beneath"
	"golang.org/x/sys/unix"
)

// Copy-back applies the upper layer of a --workdir overlay (every write of
// the jail) to DIR itself after the jail is gone, all of it or nothing:
//
//  1. plan (copyback_plan_linux.go): walk the upper layer beside DIR,
//     decide each change, and stage what it writes (files with their data,
//     symlinks, new directories) in a staging directory inside DIR (the
//     same mount, so that a rename moves it into place), owned by DIR's
//     owner and group. DIR itself is only read.
//  2. commit (copyback_commit_linux.go): move the staged entries into
//     place and what the jail deleted out of the way, into the staging
//     directory, by renames alone; a failure undoes every rename made.
//  3. remove the staging directory, and with it what the commit replaced.
//
// A limit, the deadline or a failure in steps 1-2 leaves DIR as it was
// (but for a staging directory that could not be removed, which the error
// names). Step 1 holds the cost (data, and it may fail on the host's disk:
// no room, a file too large for the file system); step 2 is renames and
// chmods, which the host's own changes during the copy may make fail.
//
// What the host changed during the run stays the host's (see workSeen): a
// deletion or replacement applies only to an entry unchanged since the run
// began, and never to a mount point; the rest is a conflict, reported.

// copyBackGrace is the least time copy-back has, however little of
// --timeout the run left.
const copyBackGrace = 2 * time.Second

// maxCopyDepth bounds how deep copy-back goes (two open directories per
// level).
const maxCopyDepth = 1024

// maxDeleteEntries bounds the entries of DIR a copy-back looks at to
// delete what the jail deleted (an `rm -r` of a large tree is one
// whiteout in the upper layer).
const maxDeleteEntries = 1 << 20

// copyBackLimits bound one copy-back: stockade does it in its own
// process, outside the run's cgroup, for what the jail chose to leave.
type copyBackLimits struct {
	deadline  time.Time // stop, applying nothing, at this time
	diskBytes int64     // most the changes may take of the host's disk (--work-size); 0: no bound
	entries   int       // most entries looked at, the upper layer's and DIR's
}

// copyBackLimitsFor is what a run of spec whose time runs out at deadline
// (the run's start plus --timeout) allows copy-back.
func copyBackLimitsFor(spec Spec, deadline time.Time, now time.Time) copyBackLimits {
	if least := now.Add(copyBackGrace); deadline.Before(least) {
		deadline = least
	}
	return copyBackLimits{deadline: deadline, diskBytes: spec.WorkSize,
		entries: int(WorkInodes(spec.WorkSize)) + maxDeleteEntries}
}

// hostBlock is what a directory or symlink is charged on the host: a block
// of ext4 or xfs at their usual size (the tmpfs stores them in an inode).
const hostBlock = 4096

// copier is one copy-back's state.
type copier struct {
	top       string   // DIR, for messages
	root      int      // DIR's fd
	seen      workSeen // DIR as the run found it
	uid, gid  int      // owner of what is copied back: DIR's (-1: leave, stockade is not root)
	stage     int      // the staging directory's fd
	stageName string
	stageIno  uint64            // its inode: its name in DIR is anyone's who can write DIR
	names     uint64            // staged names made so far
	links     map[uint64]string // upper inode -> its staged name, for hard links
	buf       []byte            // one buffer for every file: a fresh one each made 64,000 empty files cost 38 s of CPU
	lim       copyBackLimits
	entries   int   // looked at so far
	disk      int64 // host disk the staged changes take
	meta      int64 // directories and symlinks among them
	report    *CopyBack
	committed bool // every change applied
	conflicts notes
	skipped   notes
}

// copyStop is a limit copy-back reached: it applies nothing, and says so.
type copyStop struct{ reason string }

func (s *copyStop) Error() string { return s.reason }

// copyBack copies the upper layer (the directory "upper" of the tmpfs
// upperRoot) into dir, which the run found as seen, within lim. It always
// returns a report; an error means nothing was applied (and says so).
func copyBack(upperRoot int, dir string, seen workSeen, lim copyBackLimits) (*CopyBack, error) {
	t0 := time.Now()
	rep := &CopyBack{Conflicts: []string{}, Skipped: []string{}}
	c := &copier{top: dir, root: -1, stage: -1, seen: seen, uid: -1, gid: -1, links: map[uint64]string{},
		buf: make([]byte, 1<<20), lim: lim, report: rep}
	err := c.run(upperRoot)
	rep.Conflicts, rep.Skipped = c.conflicts.list(), c.skipped.list()
	rep.Ms = float64(time.Since(t0).Microseconds()) / 1000
	if err == nil {
		return rep, nil
	}
	if !c.committed {
		msg := err.Error()
		rep.Stopped = &msg
		rep.Files, rep.Bytes, rep.Deleted = 0, 0, 0
	}
	return rep, fmt.Errorf("%s: %w", dir, err)
}

func (c *copier) run(upperRoot int) (err error) {
	src, err := openUpper(upperRoot, "upper")
	if err != nil {
		return unchanged(fmt.Errorf("open the upper layer: %w", err))
	}
	defer unix.Close(src)
	if c.root, err = c.openDir(); err != nil {
		return unchanged(err)
	}
	defer unix.Close(c.root)
	defer func() {
		if c.stage < 0 {
			return // nothing staged: DIR was not touched
		}
		// What the commit replaced or removed is in the staging directory
		// now; after a failure, what was never applied.
		rerr := c.removeStage()
		unix.Close(c.stage)
		if rerr != nil {
			left := fmt.Errorf("remove the staging directory %s/%s: %w; remove it", c.top, c.stageName, rerr)
			if err == nil {
				err = fmt.Errorf("copied back, but %w", left)
			} else {
				err = fmt.Errorf("%w (and %w)", err, left)
			}
		}
	}()
	var st unix.Statx_t
	if err := unix.Statx(c.root, "", unix.AT_EMPTY_PATH, unix.STATX_CTIME, &st); err != nil {
		return unchanged(fmt.Errorf("statx: %w", err))
	}
	changes, err := c.plan(src, c.root, "", 0, hostDir{sure: true, changed: !before(st.Ctime, c.seen.since)})
	if err != nil {
		return unchanged(err)
	}
	if err := c.commit(c.root, changes, ""); err != nil {
		if uerr := c.undo(c.root, changes, ""); uerr != nil {
			return fmt.Errorf("%w; undoing the part applied failed too (%w): DIR is partly changed", err, uerr)
		}
		return unchanged(err)
	}
	c.committed = true
	return nil
}

// unchanged says that err left DIR as it was.
func unchanged(err error) error {
	return fmt.Errorf("%w; nothing was copied back (DIR is unchanged)", err)
}

// openDir opens DIR as the run found it: not through a symlink (its path,
// swapped for one during the run, would send root's writes wherever it
// points), and the same directory.
func (c *copier) openDir() (int, error) {
	fd, err := beneath.OpenPath(c.top, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW)
	if err != nil {
		return -1, fmt.Errorf("open it: %w (a path through a symbolic link is refused)", err)
	}
	var st unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_TYPE|unix.STATX_INO|unix.STATX_UID|unix.STATX_GID, &st); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("statx: %w", err)
	}
	if devOf(&st) != c.seen.dev || st.Ino != c.seen.ino {
		unix.Close(fd)
		return -1, errors.New("not the directory the run began with (replaced or mounted over during the run)")
	}
	if os.Geteuid() == 0 {
		// The changes become DIR's owner's: never root's when DIR is not,
		// nor the run's own gid (with group bits kept, the next run with
		// that gid could read them).
		c.uid, c.gid = int(st.Uid), int(st.Gid)
	}
	return fd, nil
}

// removeStage empties the staging directory through its fd, then removes
// it by name only if the name is still its own: anyone who can write DIR
// can rename it and give its name to a tree of someone else's, which root
// would then remove whole.
func (c *copier) removeStage() error {
	names, err := beneath.Names(c.stage)
	for _, n := range names {
		if err == nil {
			err = beneath.RemoveAll(c.stage, n, maxCopyDepth+1)
		}
	}
	if err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(c.root, c.stageName, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("it was moved while copying back: %w", err)
	}
	if st.Ino != c.stageIno {
		return errors.New("it was moved while copying back (its name is another directory's now); it is empty")
	}
	// rmdir: it fails on what was added since.
	return unix.Unlinkat(c.root, c.stageName, unix.AT_REMOVEDIR)
}

// makeStage makes the staging directory when it is first needed (a run
// that changed nothing leaves DIR untouched, its mtime included), named
// so that nobody guesses it, readable by us alone.
func (c *copier) makeStage() error {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	c.stageName = ".stockade-copyback-" + hex.EncodeToString(b[:])
	if err := unix.Mkdirat(c.root, c.stageName, 0o700); err != nil {
		return fmt.Errorf("make a staging directory in it: %w", err)
	}
	fd, err := beneath.OpenDirSameMount(c.root, c.stageName)
	if err != nil {
		unix.Unlinkat(c.root, c.stageName, unix.AT_REMOVEDIR)
		return fmt.Errorf("open the staging directory: %w", err)
	}
	// Between mkdir and open, whoever can write DIR can rename it and give
	// its name to another directory: what was opened must be the one made,
	// ours, private and empty.
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	var names []string
	if err == nil {
		names, err = beneath.Names(fd)
	}
	if err == nil && (int(st.Uid) != os.Geteuid() || st.Mode&0o7777 != 0o700 || len(names) != 0) {
		err = errors.New("its name leads to another directory (renamed in DIR meanwhile)")
	}
	if err != nil {
		unix.Close(fd)
		return fmt.Errorf("open the staging directory %s: %w", c.stageName, err)
	}
	c.stage, c.stageIno = fd, st.Ino
	return nil
}

// newName is a fresh name in the staging directory.
func (c *copier) newName() (string, error) {
	if c.stage < 0 {
		if err := c.makeStage(); err != nil {
			return "", err
		}
	}
	c.names++
	return fmt.Sprintf("%x", c.names), nil
}

// look counts one more entry looked at, and stops copy-back past a limit.
func (c *copier) look() error {
	c.entries++
	if c.entries > c.lim.entries {
		return &copyStop{fmt.Sprintf("more than %d entries to look at", c.lim.entries)}
	}
	if !c.lim.deadline.IsZero() && c.entries%64 == 0 && time.Now().After(c.lim.deadline) {
		return c.pastDeadline()
	}
	return nil
}

func (c *copier) pastDeadline() error {
	return &copyStop{fmt.Sprintf("copy-back reached its deadline, %s (it has what --timeout left of the run, %v at least)",
		c.lim.deadline.Format("15:04:05.000"), copyBackGrace)}
}

// own gives a staged entry DIR's owner and group, then its mode, never
// with a set-id or sticky bit (chown clears set-id bits; none are set).
func (c *copier) own(fd int, mode uint32) error {
	if c.uid >= 0 {
		if err := unix.Fchown(fd, c.uid, c.gid); err != nil {
			return err
		}
	}
	return unix.Fchmod(fd, mode&0o777)
}

// notes is a list of "path: why" for the result, bounded: a jail that
// makes a million fifos gets a hundred lines and a count.
type notes struct {
	lines []string
	bytes int
	more  int
}

const (
	maxNotes     = 100
	maxNoteBytes = 16 << 10
)

func (n *notes) add(rel, why string) {
	line := notePath(shortPath(rel)) + ": " + why
	if len(n.lines) >= maxNotes || n.bytes+len(line) > maxNoteBytes {
		n.more++
		return
	}
	n.lines = append(n.lines, line)
	n.bytes += len(line)
}

func (n *notes) list() []string {
	out := append([]string{}, n.lines...)
	if n.more > 0 {
		out = append(out, fmt.Sprintf("%d more not listed", n.more))
	}
	return out
}

// notePath is a path as a note shows it: the jail names its files with
// any bytes but '/' and NUL, and a note ends up on the caller's terminal
// (stockade run prints it to stderr), where a newline in a name fakes a
// line of stockade's and an escape sequence drives the terminal. A path
// that is not printable UTF-8, or holds a quote or a backslash (which
// would make it look quoted), is written Go-quoted: "\x1b[2J\n...".
func notePath(p string) string {
	if utf8.ValidString(p) && strings.IndexFunc(p, func(r rune) bool { return !unicode.IsPrint(r) || r == '"' || r == '\\' }) < 0 {
		return p
	}
	return strconv.Quote(p)
}

// shortPath is rel below DIR, its middle cut when long: paths can be
// 1024 levels deep.
func shortPath(rel string) string {
	if len(rel) <= 200 {
		return rel
	}
	return rel[:80] + "…" + rel[len(rel)-100:]
}

// join is the path of name below DIR's rel ("" names rel itself).
func join(rel, name string) string {
	if rel == "" || name == "" {
		return rel + name
	}
	return rel + "/" + name
}
