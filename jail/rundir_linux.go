package jail

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/stockade/stockade/internal/runlock"
	"golang.org/x/sys/unix"
)

// runDir is a run's host directory: root/ is the (empty) mount point of the
// jail's root tmpfs, work/ the fresh /work. It is recorded in the run's
// runlock slot before it is made, which is how a later stockade tells a
// dead run's directory from a live one (a pid in the name cannot: the pid
// may be of another pid namespace, or reused).
type runDir struct {
	path string
	root string
	work string
}

// rootRunBase is root's parent of run directories: /run is writable by
// root alone, so nobody can plant /run/stockade before root's first run
// (any user can make /tmp/stockade-0, after a reboot or a clean of /tmp, and
// stop every root run). /run is not private to a systemd service with
// PrivateTmp= (only /tmp and /var/tmp are), and it is a container's own
// inside a container, as its lock directory is.
const rootRunBase = "/run/stockade/dirs"

// RunBase is the parent of this stockade's run directories: for HostRoot
// rootRunBase; for anyone else dirs/ in runlock.UserDir ($XDG_RUNTIME_DIR,
// else the temp directory). A run whose usual base is not usable (another
// user made $TMPDIR/stockade-<uid> first) makes its directory in a private
// fallback instead (see newFallback).
func RunBase() string {
	if runlock.HostRoot() {
		return rootRunBase
	}
	return filepath.Join(runlock.UserDir(), "dirs")
}

// ensureBase makes base and the directory above it, 0711, and checks that
// both are ours and not writable by others: a directory planted by another
// user could redirect a run's directory. The jail user must be able to
// search them: init reaches the run directory as that user, and the lock
// directory's parent may have been made 0700 first (/run/stockade holds
// both), hence the search bits added where missing.
func ensureBase(base string) error {
	if err := runlock.EnsureOwnedDir(base, 0o711, 0o011); err != nil {
		return fmt.Errorf("run directory base %s: %w", base, err)
	}
	return nil
}

// ownRunDirPath says whether a recorded run directory path is one that a
// run of ours makes: r... in RunBase, or in a fallback base of ours.
func ownRunDirPath(d string) bool {
	if !strings.HasPrefix(filepath.Base(d), runDirPrefix) {
		return false
	}
	parent := filepath.Dir(d)
	if parent == RunBase() {
		return true
	}
	// The fallback bases, and the temp directory base of older stockades
	// (root's before it moved to /run, a normal user's before dirs/; their
	// runs' leftovers), are in a directory anyone can write: only one that
	// is really ours is entered.
	if parent != runlock.TempUserDir() && !isFallbackBase(parent) {
		return false
	}
	var st unix.Stat_t
	return unix.Lstat(parent, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR &&
		int(st.Uid) == os.Geteuid() && st.Mode&0o022 == 0
}

// runDirPrefix starts every run directory's name, "r<slot>-<pid>-<random>"
// (the run's cgroup is "stockade." and the same). The pid is a label for
// people, never a proof of anything. The name does not start with a number,
// so that an older stockade, which took "<pid>-..." directories of pids it
// could not see for leftovers, never removes ours.
const runDirPrefix = "r"

// newRunDir makes a run's directory, recorded in own first. workUID and
// workGID are the host ids of the jail user, so that it can write its fresh
// /work (workUID -1: no /work directory) and reach the run directory. Its
// errors are bare: the caller names the step ("run directory: ...").
func newRunDir(own *ownership, workUID, workGID int) (*runDir, error) {
	var base string
	if own.fallback != nil {
		base = own.fallback.path
	} else {
		base = RunBase()
		if err := ensureBase(base); err != nil {
			return nil, err
		}
	}
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, err
	}
	name := fmt.Sprintf("%s%d-%d-%s", runDirPrefix, own.lock.Slot(), os.Getpid(), hex.EncodeToString(rnd[:]))
	d := &runDir{path: filepath.Join(base, name)}
	if err := own.lock.Record(recordRunDir, d.path); err != nil {
		return nil, err
	}
	d.root = filepath.Join(d.path, "root")
	// 0710 with the jail's group: init (the jail user) can reach root/ and
	// work/, other host users cannot reach anything the jail writes while
	// it runs.
	if err := os.Mkdir(d.path, 0o700); err != nil {
		return nil, err
	}
	if err := os.Lchown(d.path, os.Getuid(), workGID); err != nil {
		d.remove()
		return nil, err
	}
	if err := os.Chmod(d.path, 0o710); err != nil {
		d.remove()
		return nil, err
	}
	if err := os.Mkdir(d.root, 0o755); err != nil {
		d.remove()
		return nil, err
	}
	if workUID >= 0 {
		d.work = filepath.Join(d.path, "work")
		if err := os.Mkdir(d.work, 0o700); err != nil {
			d.remove()
			return nil, fmt.Errorf("work directory: %w", err)
		}
		if err := os.Lchown(d.work, workUID, workGID); err != nil {
			d.remove()
			return nil, fmt.Errorf("work directory: %w", err)
		}
	}
	return d, nil
}

// remove deletes the run directory and whatever the jail wrote in /work.
// The jail is dead by now, so nothing races us. See removeTree.
func (d *runDir) remove() error {
	if err := removeTree(d.path); err != nil {
		return fmt.Errorf("remove run directory %s: %w", d.path, err)
	}
	return nil
}

// removeTree removes dir and everything below it without following a
// symlink and without holding a descriptor or a path per level: the jailed
// code may have made the tree hundreds of thousands of directories deep,
// which os.RemoveAll (an fd per level) and path-based walks (PATH_MAX)
// cannot remove. It goes down into the first non-empty subdirectory it
// finds and back up through "..", one open directory at a time; the tree
// being empty of mounts, ".." of a directory we entered is its parent,
// unless the directory was moved meanwhile: each ".." is checked against
// the inode we came down from, and a mismatch stops the removal.
// Directories the jail made unreadable are opened up first.
func removeTree(dir string) error {
	cur, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	var top unix.Stat_t
	if err := unix.Fstat(cur, &top); err != nil {
		unix.Close(cur)
		return err
	}
	depth := 0
	// parents are the inode numbers of the directories above cur, top
	// first: ".." is checked against the one we came down from, so that a
	// directory renamed out of the tree while we are inside it (by anything
	// that can still write the tree) never takes the climb out of it. A few
	// bytes a level, not a descriptor.
	var parents []uint64
	curIno, nextIno := top.Ino, uint64(0)
	buf := make([]byte, 32<<10)
	for {
		sub, err := emptyDir(cur, buf)
		if err != nil {
			unix.Close(cur)
			return err
		}
		if sub != "" {
			_ = unix.Fchmodat(cur, sub, 0o700, 0)
			next, err := unix.Openat(cur, sub, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err == nil {
				var st unix.Stat_t
				if err = unix.Fstat(next, &st); err == nil && st.Dev != top.Dev {
					err = fmt.Errorf("%s: a mount point inside the tree", sub)
				}
				nextIno = st.Ino
				if err != nil {
					unix.Close(next)
				}
			}
			if err != nil {
				unix.Close(cur)
				return err
			}
			parents = append(parents, curIno)
			unix.Close(cur)
			cur, curIno, depth = next, nextIno, depth+1
			if removeTreeEntered != nil {
				removeTreeEntered(depth)
			}
			continue
		}
		if depth == 0 {
			// Removed while still open, closed after: the directory's
			// inode is then freed by the close, not inside rmdir, which
			// holds the lock of the parent that every run's directory
			// shares. On a filesystem mounted with discard (ext4 where
			// /run is no tmpfs) freeing it waits for the disk, and every
			// other run's mkdir and rmdir there queued behind it (issue
			// 20).
			err := unix.Rmdir(dir)
			unix.Close(cur)
			return err
		}
		up, err := unix.Openat(cur, "..", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		unix.Close(cur)
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Fstat(up, &st); err != nil || st.Dev != top.Dev || st.Ino != parents[len(parents)-1] {
			unix.Close(up)
			if err == nil {
				err = fmt.Errorf("%s: a directory of the tree was moved while it was being removed", dir)
			}
			return err
		}
		parents = parents[:len(parents)-1]
		cur, curIno, depth = up, st.Ino, depth-1
	}
}

// removeTreeEntered, when set (by a test), is called each time removeTree
// has entered a directory, with its depth below the top.
var removeTreeEntered func(depth int)

// emptyDir unlinks every entry of the directory fd that is not a
// non-empty directory, and returns the name of one that is ("" when the
// directory is now empty).
func emptyDir(fd int, buf []byte) (string, error) {
	if _, err := unix.Seek(fd, 0, 0); err != nil {
		return "", err
	}
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			return "", err
		}
		if n == 0 {
			return "", nil
		}
		var names []string
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
		for _, name := range names {
			err := unix.Unlinkat(fd, name, 0)
			if errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EPERM) {
				err = unix.Unlinkat(fd, name, unix.AT_REMOVEDIR)
				if errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
					return name, nil
				}
			}
			if err != nil && !errors.Is(err, unix.ENOENT) {
				return "", fmt.Errorf("unlink %s: %w", name, err)
			}
		}
	}
}
