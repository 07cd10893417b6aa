package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/containerd/cgroups/v3/cgroup2"
	"golang.org/x/sys/unix"
)

// createV2 makes the group, writes the limits through containerd's cgroup2
// manager, and opens the directory for CLONE_INTO_CGROUP.
func (m *Manager) createV2(g *Group, l Limits) error {
	h := m.hiers[0]
	dir := filepath.Join(h.parent, g.name)
	if err := mkdirGroup(dir); err != nil {
		return fmt.Errorf("cgroup v2: %w", err)
	}
	g.dirs = []string{dir}
	for _, c := range v2Controllers {
		if m.ctlErr[c] == nil {
			g.setDir(c, dir)
		}
	}
	g.cpuacctDir = dir // cpu.stat is a core file, there even without the cpu controller
	// Load only names the group; it does no I/O. Its Update writes exactly
	// the files of the resources it is given, and nothing above the group
	// (unlike NewChild with resources, which toggles subtree_control on every
	// ancestor up to the mount root).
	r, _ := filepath.Rel(h.mount.mountPoint, dir)
	cg, err := cgroup2.Load("/"+r, cgroup2.WithMountpoint(h.mount.mountPoint))
	if err != nil {
		return fmt.Errorf("cgroup v2: load %s: %w", dir, err)
	}
	if m.ctlErr["memory"] == nil {
		mem := &cgroup2.Memory{}
		what := "memory limit"
		if l.MemoryMax > 0 {
			mem.Max = &l.MemoryMax
			what = fmt.Sprintf("memory limit %d bytes", l.MemoryMax)
		}
		if m.swap {
			// memory.swap.max is swap alone, on top of memory.max; 0 forbids swap.
			mem.Swap = &l.SwapMax
			what += fmt.Sprintf(", swap limit %d bytes", l.SwapMax)
		}
		if err := cg.Update(&cgroup2.Resources{Memory: mem}); err != nil {
			return fmt.Errorf("cgroup v2: set %s: %w", what, explainWrite(err))
		}
	}
	if l.CPUs > 0 {
		period := uint64(cfsPeriod / time.Microsecond)
		quota := int64(l.cfsQuota() / time.Microsecond)
		if err := cg.Update(&cgroup2.Resources{CPU: &cgroup2.CPU{Max: cgroup2.NewCPUMax(&quota, &period)}}); err != nil {
			return fmt.Errorf("cgroup v2: set cpu limit %g cpus (cpu.max %d %d): %w", l.CPUs, quota, period, explainWrite(err))
		}
	}
	if l.PidsMax > 0 {
		if err := cg.Update(&cgroup2.Resources{Pids: &cgroup2.Pids{Max: l.PidsMax}}); err != nil {
			return fmt.Errorf("cgroup v2: set pids limit %d: %w", l.PidsMax, explainWrite(err))
		}
	}
	g.pathFD, err = unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		g.pathFD = -1
		return fmt.Errorf("cgroup v2: open %s for CLONE_INTO_CGROUP: %w", dir, err)
	}
	return nil
}

func (g *Group) killV2() error {
	dir := g.dirs[0]
	err := writeFile(filepath.Join(dir, "cgroup.kill"), "1")
	if errors.Is(err, errMissing) {
		// Before Linux 5.14: freeze (5.2+), list, kill, thaw, until empty.
		return g.killV2Slow(dir)
	}
	if err != nil {
		return fmt.Errorf("cgroup %s: kill: %w", g.name, err)
	}
	return g.waitEmptyV2(dir)
}

func (g *Group) killV2Slow(dir string) error {
	freeze := func(on bool) {
		v := "0"
		if on {
			v = "1"
		}
		_ = writeFile(filepath.Join(dir, "cgroup.freeze"), v)
	}
	return g.killFrozen(freeze, func() ([]int, error) { return treePids(dir) })
}

// waitEmptyV2 waits until cgroup.events says "populated 0", which covers
// the whole subtree in one read.
func (g *Group) waitEmptyV2(dir string) error {
	deadline := time.Now().Add(killTimeout)
	var b backoff
	file := filepath.Join(dir, "cgroup.events")
	for {
		data, err := readFile(file)
		if err != nil {
			if errors.Is(err, unix.ENOENT) {
				return nil
			}
			return fmt.Errorf("cgroup %s: kill: %w", g.name, err)
		}
		if v, ok := keyedValue(data, "populated"); ok && v == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s: kill: still populated after %v: %s", g.name, killTimeout, bytes.TrimSpace(data))
		}
		b.sleep()
	}
}
