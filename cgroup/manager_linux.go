package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// hierarchy is one cgroup tree we create groups in: on v2 the only one, on
// v1 one per mount (cpu and cpuacct may share one).
type hierarchy struct {
	mount       mountEntry
	controllers []string // ours that live in this tree
	parent      string   // absolute directory the stockade.* groups go in
	err         error    // why the tree is unusable; nil if usable
}

func (h *hierarchy) has(c string) bool { return slices.Contains(h.controllers, c) }

// Manager creates stockade.* groups under one parent. On v2 it holds a
// shared flock on the parent directory from NewManager to Close: that lock
// is how a closing stockade proves no other stockade still relies on the
// controllers it enabled there (see Close). Each Group owns its own files.
// It never removes a group it did not create: a caller that proves a
// group's owner gone (package runlock) uses RemoveStale.
type Manager struct {
	mode     Mode
	variant  string
	hiers    []*hierarchy     // usable or not; on v1 memory's tree first, it holds the ownership lock
	ctlErr   map[string]error // controller -> why it cannot be used
	swap     bool             // the kernel accounts swap per group, so SwapMax is enforced
	hostSwap bool             // the host has active swap (matters only when swap is not accounted)
	notes    []string         // what NewManager did or found, for Describe
	logf     func(format string, a ...any)
	parentFD int // v2: the parent's lock file (lockParent), flocked LOCK_SH until Close; -1 if none
}

// NewManager detects the cgroup mode, resolves the parent, makes it usable
// (on v2 that can mean moving stockade into a leaf and enabling controllers),
// and checks that it can create
// groups. It fails only if no limit controller is usable at all; a single
// unusable controller makes Create fail closed when a limit needs it.
func NewManager(opts Options) (*Manager, error) {
	l, err := detectHost()
	if err != nil {
		return nil, err
	}
	m := setup(l, opts)
	var reasons []string
	usable := false
	for _, c := range limitControllers {
		if err := m.ctlErr[c]; err != nil {
			reasons = append(reasons, err.Error())
		} else {
			usable = true
		}
	}
	if !usable {
		_ = m.Close()
		return nil, fmt.Errorf("no cgroup controller is usable: %s", strings.Join(dedupe(reasons), "; "))
	}
	return m, nil
}

// setup is NewManager after detection, for any layout.
func setup(l layout, opts Options) *Manager {
	m := &Manager{mode: l.mode, variant: l.variant, ctlErr: map[string]error{}, logf: opts.Logf, parentFD: -1}
	if m.logf == nil {
		m.logf = func(string, ...any) {}
	}
	if l.mode == V1 {
		m.resolveV1(l, opts.Parent, opts.subdir)
	} else {
		m.resolveV2(l, opts.Parent, opts.subdir)
	}
	m.hostSwap = hostHasSwap()
	for _, h := range m.hiers {
		if h.err == nil {
			h.err = m.probe(h)
		}
		if h.err != nil {
			for _, c := range h.controllers {
				if m.ctlErr[c] == nil {
					m.ctlErr[c] = h.err
				}
			}
		}
	}
	if !m.swap && m.hostSwap && m.ctlErr["memory"] == nil {
		m.note("cgroup %s: the kernel does not account swap per cgroup (no %s); swap use is not limited (boot with swapaccount=1)", m.mode, m.swapFile())
	}
	return m
}

// Mode says whether groups live in cgroup v1 or v2.
func (m *Manager) Mode() Mode { return m.mode }

// SwapLimited reports whether Limits.SwapMax is enforced by the kernel. When
// it is false and the host has active swap, a group may swap without limit.
func (m *Manager) SwapLimited() bool { return m.swap || !m.hostSwap }

// Check returns the error Create would return for l because of an unusable
// controller, without creating anything.
func (m *Manager) Check(l Limits) error {
	if err := l.validate(); err != nil {
		return err
	}
	for _, c := range neededControllers(l) {
		if err := m.ctlErr[c]; err != nil {
			return fmt.Errorf("%s limit requested but the %s controller is not usable: %w", c, c, err)
		}
	}
	return nil
}

func neededControllers(l Limits) []string {
	var out []string
	if l.MemoryMax > 0 {
		out = append(out, "memory")
	}
	if l.CPUs > 0 {
		out = append(out, "cpu")
	}
	if l.PidsMax > 0 {
		out = append(out, "pids")
	}
	return out
}

func (m *Manager) note(format string, a ...any) {
	s := fmt.Sprintf(format, a...)
	m.notes = append(m.notes, s)
	m.logf("%s", s)
}

func (m *Manager) swapFile() string {
	if m.mode == V1 {
		return "memory.memsw.limit_in_bytes"
	}
	return "memory.swap.max"
}

// resolveV1 finds, per controller, the v1 mount and the parent directory in it.
func (m *Manager) resolveV1(l layout, parent, subdir string) {
	byMount := map[string]*hierarchy{}
	for _, c := range v1Controllers {
		mnt, ok := l.v1[c]
		if !ok {
			if c != "freezer" {
				m.ctlErr[c] = fmt.Errorf("cgroup v1 %s: no hierarchy for it is mounted", c)
			}
			continue
		}
		if h := byMount[mnt.mountPoint]; h != nil {
			h.controllers = append(h.controllers, c)
			continue
		}
		h := &hierarchy{mount: mnt, controllers: []string{c}}
		byMount[mnt.mountPoint] = h
		m.hiers = append(m.hiers, h)
		h.parent, h.err = resolveParent(mnt, l.self.v1[c], parent, subdir)
		if h.err == nil && mnt.readOnly {
			h.err = fmt.Errorf("%s is a read-only mount", mnt.mountPoint)
		}
		if h.err == nil && slices.Contains(limitControllers, c) && !libReaches(mnt, c) {
			h.err = fmt.Errorf("mounted at %s, but containerd's cgroup1 addresses it as %s/%s, which is not that mount",
				mnt.mountPoint, filepath.Dir(mnt.mountPoint), c)
		}
		if h.err != nil {
			h.err = fmt.Errorf("cgroup v1 %s: %w", c, h.err)
		}
	}
}

func resolveParent(mnt mountEntry, own, parent, subdir string) (string, error) {
	var dir string
	var err error
	if parent == "" {
		if own == "" {
			return "", errors.New("/proc/self/cgroup does not list this hierarchy")
		}
		dir, err = hostDir(mnt, own)
	} else {
		dir, err = parentDir(mnt, parent)
	}
	if err != nil {
		return "", err
	}
	if st, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("cgroup parent %s: %w", dir, errors.Unwrap(err))
	} else if !st.IsDir() {
		return "", fmt.Errorf("cgroup parent %s is not a directory", dir)
	}
	if subdir != "" {
		dir = filepath.Join(dir, subdir)
		if err := unix.Mkdir(dir, 0o755); err != nil && err != unix.EEXIST {
			return "", fmt.Errorf("mkdir %s: %w", dir, err)
		}
	}
	return dir, nil
}

// resolveV2 finds the parent and makes sure the controllers are enabled for
// its children. cgroup v2 lets a cgroup enable controllers for children only
// while it holds no processes ("no internal processes"), except at the root.
// When stockade's own cgroup is the parent and holds stockade, the way out
// is what container inits do: move ourselves into a leaf, <own>/supervisor.
func (m *Manager) resolveV2(l layout, parent, subdir string) {
	h := &hierarchy{mount: *l.v2, controllers: slices.Clone(v2Controllers)}
	m.hiers = []*hierarchy{h}
	own := l.self.unified
	if path.Base(own) == leafName {
		// We (or the stockade that started us) moved here earlier; the
		// groups go beside the leaf, not below it, or every NewManager in
		// a long-lived process would nest one level deeper.
		own = path.Dir(own)
	}
	h.parent, h.err = resolveParent(*l.v2, own, parent, subdir)
	if h.err == nil && l.v2.readOnly {
		h.err = fmt.Errorf("%s is a read-only mount (a container without a writable cgroupfs?)", l.v2.mountPoint)
	}
	if h.err == nil {
		// A user who may not make a directory in the parent is told so
		// before the lock: the lock is a file in root's /run/stockade for
		// a root euid (a thread acting as another user through its fsuid
		// cannot make it there), and a run that cannot use the parent
		// should leave no lock file anywhere. The kernel's DAC check for
		// mkdir is this one; delegation and nsdelegate may refuse more,
		// never less, and the probe's mkdir finds that out.
		if err := unix.Faccessat(unix.AT_FDCWD, h.parent, unix.W_OK|unix.X_OK, unix.AT_EACCESS); err != nil {
			h.err = m.notWritable(h, err)
			return
		}
		// Before reading or changing anything in the parent: a stockade
		// undoing its leaf there (Close) holds LOCK_EX, and we must see
		// the parent after it is done, not halfway.
		m.parentFD, h.err = lockParent(h.parent, unix.LOCK_SH)
	}
	if h.err != nil {
		h.err = fmt.Errorf("cgroup v2: %w", h.err)
		return
	}
	avail, err := readFields(filepath.Join(h.parent, "cgroup.controllers"))
	if err != nil {
		h.err = fmt.Errorf("cgroup v2: %w", err)
		return
	}
	enabled, err := readFields(filepath.Join(h.parent, "cgroup.subtree_control"))
	if err != nil {
		h.err = fmt.Errorf("cgroup v2: %w", err)
		return
	}
	var missing []string
	for _, c := range v2Controllers {
		switch {
		case !slices.Contains(avail, c):
			m.ctlErr[c] = fmt.Errorf("cgroup v2 %s: not delegated to %s (its cgroup.controllers lacks %s; the parent's owner must enable it, e.g. systemd Delegate=yes)", c, h.parent, c)
		case !slices.Contains(enabled, c):
			missing = append(missing, c)
		}
	}
	if len(missing) == 0 {
		return
	}
	err = enableControllers(h.parent, missing)
	if errors.Is(err, unix.EBUSY) && parent == "" {
		if merr := m.moveSelfToLeaf(h.parent); merr != nil {
			err = fmt.Errorf("%w; moving stockade into a leaf failed too: %v", err, merr)
		} else {
			err = enableControllers(h.parent, missing)
		}
		if errors.Is(err, unix.EBUSY) && own == "/" {
			// The root of our cgroup namespace: a container's own cgroup,
			// holding its init and shells beside stockade. The container
			// is the delegated unit, and the way every nested runtime
			// (docker-in-docker, systemd in a container) makes it usable
			// is to move its processes into the leaf too. Never outside a
			// namespace root: there the others are not ours.
			// A process forked while its parent was being moved can
			// still land in the root (seen once in four VM runs): move
			// again, a few times, while the kernel says busy.
			for try := 0; errors.Is(err, unix.EBUSY) && try < 5; try++ {
				if merr := m.moveOthersToLeaf(h.parent); merr != nil {
					err = fmt.Errorf("%w; moving the container's processes into the leaf failed too: %v", err, merr)
					break
				}
				err = enableControllers(h.parent, missing)
			}
		}
	}
	if err != nil {
		err = explainEnable(h.parent, err)
		for _, c := range missing {
			m.ctlErr[c] = err
		}
		return
	}
	m.note("cgroup v2: enabled %s for children of %s", plusList(missing), h.parent)
}

func enableControllers(dir string, cs []string) error {
	return writeFile(filepath.Join(dir, "cgroup.subtree_control"), plusList(cs))
}

func plusList(cs []string) string {
	var b strings.Builder
	for i, c := range cs {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("+" + c)
	}
	return b.String()
}

// explainEnable turns the kernel's errno for a subtree_control write into
// what the operator has to change.
func explainEnable(dir string, err error) error {
	why := ""
	switch {
	case errors.Is(err, unix.EBUSY):
		n := 0
		if pids, perr := readPids(dir); perr == nil {
			n = len(pids)
		}
		why = fmt.Sprintf("%s still holds %d processes other than stockade, and cgroup v2 enables controllers for children only in a cgroup without processes; run stockade in a cgroup of its own or pass a --cgroup-parent", dir, n)
	case errors.Is(err, unix.EROFS):
		why = "the cgroup filesystem is read-only"
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		why = fmt.Sprintf("%s is not delegated to uid %d", dir, os.Geteuid())
	default:
		return fmt.Errorf("cgroup v2: %w", err)
	}
	return fmt.Errorf("cgroup v2: %w: %s", err, why)
}

// moveSelfToLeaf moves this process (all its threads) into dir/supervisor.
// Only stockade itself is moved: other processes in the cgroup are not ours.
func (m *Manager) moveSelfToLeaf(dir string) error {
	leaf := filepath.Join(dir, leafName)
	if err := unix.Mkdir(leaf, 0o755); err != nil && err != unix.EEXIST {
		return fmt.Errorf("mkdir %s: %w", leaf, err)
	}
	if err := writeFile(filepath.Join(leaf, "cgroup.procs"), strconv.Itoa(os.Getpid())); err != nil {
		return err
	}
	m.note("cgroup v2: moved stockade (pid %d) into %s so that %s may enable controllers for its children", os.Getpid(), leaf, dir)
	return nil
}

// moveOthersToLeaf moves every process left in dir into dir/supervisor,
// where stockade already is. Only called at the root of stockade's cgroup
// namespace (see resolveV2).
func (m *Manager) moveOthersToLeaf(dir string) error {
	leaf := filepath.Join(dir, leafName)
	pids, err := readPids(dir)
	if err != nil {
		return err
	}
	moved := 0
	for _, pid := range pids {
		err := writeFile(filepath.Join(leaf, "cgroup.procs"), strconv.Itoa(pid))
		if err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("move pid %d into %s: %w", pid, leaf, err)
		}
		moved++
	}
	m.note("cgroup v2: %s is the root of this cgroup namespace (a container); moved its %d other processes into %s as nested runtimes do", dir, moved, leaf)
	return nil
}

// probe checks that we can create a child in h, the only honest test of
// writability on v2 (where delegation, nsdelegate and cgroup namespaces all
// have a say), and learns from the child whether swap is accounted.
//
// On v1 the check is faccessat2 with our effective ids instead: v1 has no
// delegation beyond file permissions, and a probe mkdir and rmdir in each of
// five hierarchies costs more than 0.1ms on every run.
func (m *Manager) probe(h *hierarchy) error {
	notWritable := func(err error) error { return m.notWritable(h, err) }
	if m.mode == V1 {
		if err := unix.Faccessat(unix.AT_FDCWD, h.parent, unix.W_OK|unix.X_OK, unix.AT_EACCESS); err != nil {
			return notWritable(err)
		}
		if h.has("memory") {
			m.swap = exists(filepath.Join(h.parent, m.swapFile()))
		}
		return nil
	}
	name := fmt.Sprintf("%sprobe-%d", groupPrefix, os.Getpid())
	dir := filepath.Join(h.parent, name)
	if err := unix.Mkdir(dir, 0o755); err != nil && err != unix.EEXIST {
		return notWritable(err)
	}
	// The parent may be the root cgroup, which has no memory.swap.max of
	// its own; a child of it shows whether swap is accounted.
	if h.has("memory") {
		m.swap = exists(filepath.Join(dir, m.swapFile()))
	}
	// Another stockade's sweep may remove the probe first; that is fine.
	if err := unix.Rmdir(dir); err != nil && err != unix.ENOENT {
		return fmt.Errorf("cgroup %s: remove probe %s: %w", m.mode, dir, err)
	}
	return nil
}

// notWritable says that h's parent refused a write with err.
func (m *Manager) notWritable(h *hierarchy, err error) error {
	why := err.Error()
	if err == unix.EROFS {
		why = "the cgroup filesystem is read-only"
	}
	return fmt.Errorf("cgroup %s %s: %s is not writable: %s", m.mode, strings.Join(h.controllers, ","), h.parent, why)
}

func readFields(path string) ([]string, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(data)), nil
}

// hostHasSwap reports whether any swap area is active; without one, "no
// swap" holds even where the kernel cannot limit swap per cgroup.
func hostHasSwap() bool {
	data, err := readFile("/proc/swaps")
	if err != nil {
		return true // unknown: assume the worse case
	}
	return strings.Count(strings.TrimSpace(string(data)), "\n") > 0
}

func dedupe(s []string) []string {
	var out []string
	for _, x := range s {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}
