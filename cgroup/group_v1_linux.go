package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/cgroups/v3/cgroup1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// createV1 makes the group in every usable v1 hierarchy and writes the limits through containerd's cgroup1 controllers.
func (m *Manager) createV1(g *Group, l Limits) error {
	var memH, cpuH, pidsH *hierarchy
	for _, h := range m.hiers {
		if h.err != nil {
			continue
		}
		dir := filepath.Join(h.parent, g.name)
		if err := mkdirGroup(dir); err != nil {
			return fmt.Errorf("cgroup v1 %s: %w", strings.Join(h.controllers, ","), err)
		}
		g.dirs = append(g.dirs, dir)
		for _, c := range h.controllers {
			g.setDir(c, dir)
		}
		if h.has("memory") {
			memH = h
		}
		if h.has("cpu") {
			cpuH = h
		}
		if h.has("pids") {
			pidsH = h
		}
	}
	if l.MemoryMax > 0 {
		// v1 keeps TCP socket buffers out of the memory counter and
		// accounts them at all only once kmem.tcp.limit_in_bytes is set:
		// unset, one process held 457 MiB of loopback buffers under a
		// 64 MiB limit. They get a limit of their own, a quarter of the
		// memory limit (v2 counts them in memory.current).
		tcp := tcpLimit(l.MemoryMax)
		mem := &specs.LinuxMemory{Limit: &l.MemoryMax, KernelTCP: &tcp}
		what := fmt.Sprintf("memory limit %d bytes (TCP buffers %d)", l.MemoryMax, tcp)
		if m.swap {
			// memsw is memory+swap, so the swap allowance rides on top.
			// The library writes limit_in_bytes before memsw, which the
			// kernel needs (memsw may never be below the memory limit).
			total := l.MemoryMax + l.SwapMax
			mem.Swap = &total
			what += fmt.Sprintf(" with %d bytes of swap", l.SwapMax)
		}
		err := cgroup1.NewMemory(libRoot(memH)).Create(rel(memH, g.name), &specs.LinuxResources{Memory: mem})
		if err != nil {
			return fmt.Errorf("cgroup v1: set %s: %w", what, explainWrite(err))
		}
	}
	if l.CPUs > 0 {
		period := uint64(cfsPeriod / time.Microsecond)
		quota := int64(l.cfsQuota() / time.Microsecond)
		cpu := &specs.LinuxCPU{Period: &period, Quota: &quota}
		if err := cgroup1.NewCpu(libRoot(cpuH)).Create(rel(cpuH, g.name), &specs.LinuxResources{CPU: cpu}); err != nil {
			return fmt.Errorf("cgroup v1: set cpu limit %g cpus (quota %dus per %dus): %w", l.CPUs, quota, period, explainWrite(err))
		}
	}
	if l.PidsMax > 0 {
		pids := &specs.LinuxPids{Limit: &l.PidsMax}
		if err := cgroup1.NewPids(libRoot(pidsH)).Create(rel(pidsH, g.name), &specs.LinuxResources{Pids: pids}); err != nil {
			return fmt.Errorf("cgroup v1: set pids limit %d: %w", l.PidsMax, explainWrite(err))
		}
	}
	return nil
}

// tcpLimit is the v1 limit of a group's TCP socket buffers.
func tcpLimit(memoryMax int64) int64 { return max(memoryMax/4, 1<<20) }

// libRoot is the directory containerd's cgroup1 controllers expect: they
// address a hierarchy as <root>/<controller>. resolveV1 has checked that
// this reaches the mount (directly or by systemd's cpu -> cpu,cpuacct link).
func libRoot(h *hierarchy) string { return filepath.Dir(h.mount.mountPoint) }

// rel is the group's path inside its hierarchy, as the library wants it.
func rel(h *hierarchy, name string) string {
	r, _ := filepath.Rel(h.mount.mountPoint, filepath.Join(h.parent, name))
	return "/" + r
}

// libReaches reports whether <dir of mount>/<controller> is the mount itself.
func libReaches(mnt mountEntry, controller string) bool {
	p := filepath.Join(filepath.Dir(mnt.mountPoint), controller)
	if p == mnt.mountPoint {
		return true
	}
	var a, b unix.Stat_t
	return unix.Stat(p, &a) == nil && unix.Stat(mnt.mountPoint, &b) == nil && a.Dev == b.Dev && a.Ino == b.Ino
}

// explainWrite turns kernfs's EACCES for a file that does not exist into
// errMissing, so the error says the controller file is absent.
func explainWrite(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) && errors.Is(pe.Err, unix.EACCES) && !exists(pe.Path) {
		return fmt.Errorf("%s: %w", pe.Path, errMissing)
	}
	return err
}

func (g *Group) killV1() error {
	return g.killFrozen(g.freezeV1, g.procsLeft)
}

// freezeV1 freezes or thaws the group through the v1 freezer, if there is
// one, waiting a bounded time for FROZEN: a task in uninterruptible sleep
// can keep the group FREEZING, and then we kill what we can and go around.
func (g *Group) freezeV1(freeze bool) {
	if g.freezerDir == "" {
		return
	}
	state := "THAWED"
	if freeze {
		state = "FROZEN"
	}
	file := filepath.Join(g.freezerDir, "freezer.state")
	if writeFile(file, state) != nil || !freeze {
		return
	}
	deadline := time.Now().Add(100 * time.Millisecond)
	var b backoff
	for time.Now().Before(deadline) {
		data, err := readFile(file)
		if err != nil || strings.TrimSpace(string(data)) == state {
			return
		}
		b.sleep()
	}
}
