package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// leafName is the leaf stockade moves itself into on v2 (resolveV2).
const leafName = "supervisor"

// Close releases the Manager's shared lock on its v2 parent. It undoes
// nothing: a process that keeps running jails (a library user, a test
// binary that also starts stockade children) stays in its leaf, where the
// children it starts are born. Restore, at the process's exit, undoes the
// leaf. Safe to call more than once.
func (m *Manager) Close() error {
	if m == nil || m.parentFD < 0 {
		return nil
	}
	err := unix.Close(m.parentFD)
	m.parentFD = -1
	return err
}

// Restore is for a stockade process about to exit (`stockade run`, doctor,
// serve): if a Manager moved it into <parent>/supervisor on cgroup v2,
// Restore puts the parent back the way a unit's cgroup has to be for the
// unit's next process. NewManager enabled controllers for the parent's
// children, and under cgroup v2's "no internal processes" rule nobody (not
// systemd starting the unit's next Exec*=) can put a process into the
// parent while those stay enabled. So Restore disables them, moves this
// process back and removes the leaf, but only when nothing else can rely
// on them: no stockade holds the parent's lock (every Manager holds it
// shared until Close; Restore needs it exclusive), the leaf holds this
// process alone, and the parent has no other child and no process.
// Otherwise it leaves everything as it is. It says what it did ("" for
// nothing). Close every Manager (and delete its groups) first.
func Restore() (string, error) {
	if !inLeaf() {
		return "", nil
	}
	l, err := detectHost()
	if err != nil || l.mode != V2 || l.v2 == nil {
		return "", nil
	}
	return restoreOn(*l.v2)
}

func restoreOn(mnt mountEntry) (string, error) {
	self, err := selfV2Dir(mnt)
	if err != nil || filepath.Base(self) != leafName {
		return "", err
	}
	parent := filepath.Dir(self)
	fd, err := lockParent(parent, unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return "", nil // another stockade uses the parent: its controllers stay
	}
	if err != nil {
		return "", fmt.Errorf("cgroup v2: %w", err)
	}
	defer unix.Close(fd)
	what, err := undoLeaf(mnt, parent)
	if err != nil {
		return "", fmt.Errorf("cgroup v2: undo %s: %w", self, err)
	}
	if what != "" {
		what = "cgroup v2: " + what
	}
	return what, nil
}

// undoLeaf does Restore's undo under the exclusive lock, and says what it
// did ("" for nothing). Every check comes before the first change, and the
// changes go in the only order the kernel allows: controllers off, then the
// process back into the parent, then the empty leaf removed.
func undoLeaf(mnt mountEntry, parent string) (string, error) {
	leaf := filepath.Join(parent, leafName)
	self, err := selfV2Dir(mnt)
	if err != nil {
		return "", err
	}
	if self != leaf {
		return "", nil // we never moved (or someone moved us elsewhere)
	}
	// Any other child is someone's: a stockade.* group of a run still
	// going or crashed, or a group the unit made itself.
	if others, err := subdirs(parent); err != nil {
		return "", err
	} else if len(others) != 1 {
		return "", nil
	}
	if kids, err := subdirs(leaf); err != nil || len(kids) != 0 {
		return "", err
	}
	pids, err := readPids(leaf)
	if err != nil {
		return "", err
	}
	if len(pids) != 1 || pids[0] != os.Getpid() {
		// The leaf holds processes stockade started (or, at the root of a
		// container's cgroup namespace, the container's own): they stay
		// in a cgroup without controllers in use only if we leave it be.
		return "", nil
	}
	if pids, err := readPids(parent); err != nil || len(pids) != 0 {
		return "", err
	}
	leafCtl, err := readFields(filepath.Join(leaf, "cgroup.subtree_control"))
	if err != nil || len(leafCtl) != 0 {
		return "", err
	}
	enabled, err := readFields(filepath.Join(parent, "cgroup.subtree_control"))
	if err != nil {
		return "", err
	}
	for _, c := range enabled {
		if !slices.Contains(v2Controllers, c) {
			// Not one stockade enables: someone else's intent, and with
			// it on the parent cannot take a process back anyway.
			return "", nil
		}
	}
	if len(enabled) > 0 {
		off := ""
		for i, c := range enabled {
			if i > 0 {
				off += " "
			}
			off += "-" + c
		}
		if err := writeFile(filepath.Join(parent, "cgroup.subtree_control"), off); err != nil {
			return "", err
		}
	}
	if err := writeFile(filepath.Join(parent, "cgroup.procs"), strconv.Itoa(os.Getpid())); err != nil {
		if len(enabled) > 0 {
			// Put back what we took, so the state is the one we found.
			_ = enableControllers(parent, enabled)
		}
		return "", err
	}
	if err := unix.Rmdir(leaf); err != nil && !errors.Is(err, unix.ENOENT) {
		return "", fmt.Errorf("rmdir %s: %w", leaf, err)
	}
	what := fmt.Sprintf("moved stockade (pid %d) back into %s and removed %s", os.Getpid(), parent, leaf)
	if len(enabled) > 0 {
		what = fmt.Sprintf("disabled %s for children of %s, ", plusList(enabled), parent) + what
	}
	return what + ", as it found them", nil
}

// selfV2Dir is this process's cgroup v2 directory, read now: NewManager
// may have moved it since detectHost.
func selfV2Dir(mnt mountEntry) (string, error) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	defer f.Close()
	pc, err := parseProcCgroup(f)
	if err != nil {
		return "", err
	}
	if pc.unified == "" {
		return "", errors.New("/proc/self/cgroup has no 0:: line")
	}
	return hostDir(mnt, pc.unified)
}

// inLeaf says whether this process may be in a leaf of ours: its cgroup v2
// path (the 0:: line of /proc/self/cgroup) ends in leafName. Every
// stockade asks at exit, and on a v1 or hybrid host, or outside a leaf,
// that answer alone is enough: the mount table, whose parse is most of
// Restore's cost (hundreds of mounts on a container host), is read only
// for a process that is in one. On doubt it says yes, and Restore decides
// as before.
func inLeaf() bool {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return true
	}
	defer f.Close()
	pc, err := parseProcCgroup(f)
	if err != nil {
		return true
	}
	return pc.unified != "" && path.Base(pc.unified) == leafName
}
