package cgroup

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// groupPrefix names every group stockade creates, and only those: a stale
// sweep never touches a cgroup without it. It is "stockade." and no longer
// "stockade-" so that an older stockade on the same host, whose sweep took
// any unlocked stockade-* group in a shared hierarchy for its own crash
// leftover, never sees ours.
const groupPrefix = "stockade."

// killTimeout bounds how long Kill and Delete wait for a group to empty.
// SIGKILLed tasks exit in microseconds unless stuck in the kernel.
const killTimeout = 2 * time.Second

// Group is one run's cgroup, in every hierarchy the mode needs.
// CPUUsage, Stats, Kill and AddProc may run concurrently (the jail polls CPU
// time while it waits); Delete must not race with any of them.
type Group struct {
	mode Mode
	name string
	// dirs holds one directory per hierarchy. Who owns them is recorded
	// outside the cgroupfs, in the run's runlock slot.
	dirs []string
	// Where each controller's files are. On v2 all are the one directory;
	// "" means the controller is not usable and its stats read as zero.
	memDir, cpuDir, cpuacctDir, pidsDir, freezerDir string
	pathFD                                          int // v2: O_PATH directory fd for CLONE_INTO_CGROUP
	deleted                                         bool
}

// Create makes a fresh group "stockade.<id>" and writes the limits before
// returning. It fails closed: if a requested limit cannot be set, everything
// created is removed and the error names the limit and the file.
func (m *Manager) Create(id string, l Limits) (*Group, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	if err := m.Check(l); err != nil {
		return nil, fmt.Errorf("create cgroup %s%s: %w", groupPrefix, id, err)
	}
	g := &Group{mode: m.mode, name: groupPrefix + id, pathFD: -1}
	var err error
	if m.mode == V1 {
		err = m.createV1(g, l)
	} else {
		err = m.createV2(g, l)
	}
	if err != nil {
		if derr := g.Delete(); derr != nil {
			err = fmt.Errorf("%w (cleaning up: %v)", err, derr)
		}
		return nil, fmt.Errorf("create cgroup %s: %w", g.name, err)
	}
	return g, nil
}

func validID(id string) error {
	if id == "" || strings.ContainsAny(id, "/\x00\n") || id == "." || id == ".." || len(id) > 200 {
		return fmt.Errorf("cgroup id %q: must be a non-empty single path element", id)
	}
	return nil
}

func (g *Group) setDir(controller, dir string) {
	switch controller {
	case "memory":
		g.memDir = dir
	case "cpu":
		g.cpuDir = dir
	case "cpuacct":
		g.cpuacctDir = dir
	case "pids":
		g.pidsDir = dir
	case "freezer":
		g.freezerDir = dir
	}
}

// GroupDirs lists the directories Create(id) makes, one per usable
// hierarchy, so the caller can record them as its own before they exist.
func (m *Manager) GroupDirs(id string) []string {
	var out []string
	for _, h := range m.hiers {
		if h.err == nil {
			out = append(out, filepath.Join(h.parent, groupPrefix+id))
		}
	}
	return out
}

// mkdirGroup creates one hierarchy's directory of a new group.
func mkdirGroup(dir string) error {
	if err := unix.Mkdir(dir, 0o755); err != nil {
		if err == unix.EEXIST {
			return fmt.Errorf("mkdir %s: already exists (group ids must be unique)", dir)
		}
		return fmt.Errorf("mkdir %s: %w", dir, err)
	}
	return nil
}

// CgroupFD returns the group's directory fd for clone3's CLONE_INTO_CGROUP
// (syscall.SysProcAttr UseCgroupFD/CgroupFD), which places the child in the
// group atomically, before it runs a single instruction. ok is false on v1,
// where AddProc is the only way. The Group owns the fd; Delete closes it.
func (g *Group) CgroupFD() (fd int, ok bool) {
	if g.mode != V2 || g.pathFD < 0 {
		return -1, false
	}
	return g.pathFD, true
}

// AddProc moves pid (all its threads) into the group in every hierarchy.
func (g *Group) AddProc(pid int) error {
	if pid <= 0 {
		return fmt.Errorf("cgroup %s: add pid %d: not a process id", g.name, pid)
	}
	s := strconv.Itoa(pid)
	for _, dir := range g.dirs {
		var err error
		for range 5 {
			// EINVAL means the task is still being set up by fork; runc
			// and containerd retry the same way.
			if err = writeFile(dir+"/cgroup.procs", s); !errors.Is(err, unix.EINVAL) {
				break
			}
			time.Sleep(time.Millisecond)
		}
		if err != nil {
			return fmt.Errorf("cgroup %s: add pid %d: %w", g.name, pid, err)
		}
	}
	return nil
}

// Kill SIGKILLs every process in the group and waits (bounded) until the
// group is empty. On v2 that is cgroup.kill, which the kernel applies to the
// whole subtree at once, forks included. On v1 the group is frozen first so
// that nothing can fork while it is listed and signalled, then thawed so the
// signals take effect, and this repeats until the group is empty.
func (g *Group) Kill() error {
	if g.deleted {
		return nil
	}
	if g.mode == V1 {
		return g.killV1()
	}
	return g.killV2()
}

// Delete kills anything left, removes the group in every hierarchy and
// closes its fds. A finished run leaves an empty group, so the common case
// is one rmdir per hierarchy. It is idempotent; after an error it may be
// called again.
func (g *Group) Delete() error {
	if g.deleted {
		return nil
	}
	err := g.removeDirs()
	if err != nil {
		if kerr := g.Kill(); kerr != nil {
			err = kerr
		} else {
			err = g.removeDirsRetry()
		}
	}
	if g.pathFD >= 0 {
		unix.Close(g.pathFD)
		g.pathFD = -1
	}
	if err != nil {
		return fmt.Errorf("delete cgroup %s: %w", g.name, err)
	}
	g.deleted = true
	return nil
}

func (g *Group) removeDirs() error {
	for i := len(g.dirs) - 1; i >= 0; i-- {
		if err := removeTree(g.dirs[i]); err != nil {
			return err
		}
	}
	return nil
}

// removeDirsRetry retries rmdir for a while: after the last task exits the
// kernel may still be finishing its exit and answer EBUSY for a moment.
func (g *Group) removeDirsRetry() error {
	deadline := time.Now().Add(killTimeout)
	var b backoff
	for {
		err := g.removeDirs()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		b.sleep()
	}
}

// procsLeft lists the tasks still in the group, in any hierarchy.
func (g *Group) procsLeft() ([]int, error) {
	var all []int
	for _, dir := range g.dirs {
		pids, err := treePids(dir)
		if err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return nil, err
		}
		all = append(all, pids...)
	}
	// On v1 every task is listed once per hierarchy.
	slices.Sort(all)
	return slices.Compact(all), nil
}

// killFrozen kills what procs lists until it lists nothing: it freezes the
// group around each listing so that nothing forks between the list and the
// signals, and thaws it after, as frozen tasks cannot die. Past killTimeout
// it gives up and names who is left.
func (g *Group) killFrozen(freeze func(on bool), procs func() ([]int, error)) error {
	deadline := time.Now().Add(killTimeout)
	var b backoff
	for {
		freeze(true)
		pids, err := procs()
		if err == nil {
			signalAll(pids)
		}
		freeze(false)
		if err != nil {
			return fmt.Errorf("cgroup %s: kill: %w", g.name, err)
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s: kill: %d processes still there after %v (stuck in the kernel?): %v", g.name, len(pids), killTimeout, pids)
		}
		b.sleep()
	}
}

// signalAll SIGKILLs the listed tasks. The pids come from cgroup.procs, and
// with the group frozen none of them can exit and be reused under us.
func signalAll(pids []int) {
	for _, pid := range pids {
		_ = unix.Kill(pid, unix.SIGKILL) // ESRCH: already gone
	}
}
