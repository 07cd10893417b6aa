package cgroup

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// userHZ is the unit of v1 cpuacct.stat: USER_HZ, which the kernel fixes at
// 100 on every architecture Go supports for Linux.
const userHZ = 100

// CPUUsage is the CPU time used by every task that ever ran in the group
// (user and system, exited tasks included). It is one small file read, so
// the jail can poll it to enforce a CPU-time limit.
func (g *Group) CPUUsage() (time.Duration, error) {
	if g.deleted {
		return 0, fmt.Errorf("cgroup %s: cpu usage: the group is deleted", g.name)
	}
	if g.cpuacctDir == "" {
		return 0, fmt.Errorf("cgroup %s: cpu usage: no cpuacct hierarchy", g.name)
	}
	if g.mode == V1 {
		data, err := readFile(filepath.Join(g.cpuacctDir, "cpuacct.usage"))
		if err != nil {
			return 0, fmt.Errorf("cgroup %s: cpu usage: %w", g.name, err)
		}
		ns, err := parseValue(data)
		if err != nil {
			return 0, fmt.Errorf("cgroup %s: cpu usage: %w", g.name, err)
		}
		return time.Duration(ns), nil
	}
	data, err := readFile(filepath.Join(g.cpuacctDir, "cpu.stat"))
	if err != nil {
		return 0, fmt.Errorf("cgroup %s: cpu usage: %w", g.name, err)
	}
	us, ok := keyedValue(data, "usage_usec")
	if !ok {
		return 0, fmt.Errorf("cgroup %s: cpu usage: no usage_usec in cpu.stat", g.name)
	}
	return time.Duration(us) * time.Microsecond, nil
}

// Stats reads what the group used. A counter the kernel does not have (an
// older kernel, a controller that is not usable here) reads as zero.
func (g *Group) Stats() (Stats, error) {
	if g.deleted {
		// Every file would be missing and read as zero; say so instead.
		return Stats{}, fmt.Errorf("cgroup %s: stats: the group is deleted", g.name)
	}
	r := statReader{}
	var s Stats
	if g.mode == V1 {
		s = g.statsV1(&r)
	} else {
		s = g.statsV2(&r)
	}
	if r.err != nil {
		return Stats{}, fmt.Errorf("cgroup %s: stats: %w", g.name, r.err)
	}
	return s, nil
}

func (g *Group) statsV1(r *statReader) Stats {
	var s Stats
	if g.memDir != "" {
		// v1 counts TCP buffers apart (see tcpLimit); the run held both.
		s.MemoryPeak = r.value(g.memDir, "memory.max_usage_in_bytes") + r.value(g.memDir, "memory.kmem.tcp.max_usage_in_bytes")
		s.MemoryNow = r.value(g.memDir, "memory.usage_in_bytes") + r.value(g.memDir, "memory.kmem.tcp.usage_in_bytes")
		// oom_kill appeared in memory.oom_control in Linux 4.13.
		s.OOMKills = r.key(g.memDir, "memory.oom_control", "oom_kill")
		// The kernel charges memory+swap first: with memsw equal to the
		// memory limit (no swap), the hit is counted in memsw.failcnt alone.
		s.MemoryLimitHit = r.value(g.memDir, "memory.failcnt") > 0
		if memsw := r.value(g.memDir, "memory.memsw.failcnt"); memsw > 0 {
			s.MemoryLimitHit = true
		}
		// Some kernels leave both failcnts at 0 even across an OOM kill
		// (seen on 6.18), and the OOM killer runs in a group only when
		// the group is at its limit.
		s.MemoryLimitHit = s.MemoryLimitHit || s.OOMKills > 0
	}
	if g.cpuacctDir != "" {
		s.CPUUsage = time.Duration(r.value(g.cpuacctDir, "cpuacct.usage"))
		st := r.file(g.cpuacctDir, "cpuacct.stat")
		u, _ := keyedValue(st, "user")
		k, _ := keyedValue(st, "system")
		s.UserCPU = time.Duration(u) * time.Second / userHZ
		s.SystemCPU = time.Duration(k) * time.Second / userHZ
	}
	if g.pidsDir != "" {
		s.PidsPeak = r.value(g.pidsDir, "pids.peak")
		s.PidsNow = r.value(g.pidsDir, "pids.current")
		s.PidsLimitHit = r.key(g.pidsDir, "pids.events", "max") > 0
	}
	return s
}

func (g *Group) statsV2(r *statReader) Stats {
	var s Stats
	if g.memDir != "" {
		// memory.peak is Linux 5.19+; before it, memory.current is the best
		// we have, and it understates the peak once the run has exited.
		s.MemoryNow = r.value(g.memDir, "memory.current")
		s.MemoryPeak = r.value(g.memDir, "memory.peak")
		if r.missing {
			s.MemoryPeak = s.MemoryNow
		}
		ev := r.file(g.memDir, "memory.events")
		s.OOMKills, _ = keyedValue(ev, "oom_kill")
		hits, _ := keyedValue(ev, "max")
		s.MemoryLimitHit = hits > 0 || s.OOMKills > 0
	}
	st := r.file(g.cpuacctDir, "cpu.stat")
	usage, _ := keyedValue(st, "usage_usec")
	user, _ := keyedValue(st, "user_usec")
	sys, _ := keyedValue(st, "system_usec")
	s.CPUUsage = time.Duration(usage) * time.Microsecond
	s.UserCPU = time.Duration(user) * time.Microsecond
	s.SystemCPU = time.Duration(sys) * time.Microsecond
	if g.pidsDir != "" {
		s.PidsPeak = r.value(g.pidsDir, "pids.peak") // Linux 6.1+
		s.PidsNow = r.value(g.pidsDir, "pids.current")
		s.PidsLimitHit = r.key(g.pidsDir, "pids.events", "max") > 0
	}
	return s
}

// statReader reads stat files, remembering the first real error and
// treating a missing file as zero (missing says whether the last one was).
type statReader struct {
	err     error
	missing bool
}

func (r *statReader) file(dir, name string) []byte {
	r.missing = false
	if r.err != nil {
		return nil
	}
	data, err := readFile(filepath.Join(dir, name))
	if errors.Is(err, unix.ENOENT) {
		r.missing = true
		return nil
	}
	if err != nil {
		r.err = err
	}
	return data
}

func (r *statReader) value(dir, name string) uint64 {
	data := r.file(dir, name)
	if data == nil {
		return 0
	}
	v, err := parseValue(data)
	if err != nil && r.err == nil {
		r.err = fmt.Errorf("%s/%s: %w", dir, name, err)
	}
	return v
}

func (r *statReader) key(dir, name, key string) uint64 {
	v, _ := keyedValue(r.file(dir, name), key)
	return v
}

// ErrPeakNotResettable is a memory peak the kernel keeps for the group's
// whole life: cgroup v2's memory.peak, which only a reader holding it open
// may reset (Linux 6.12).
var ErrPeakNotResettable = errors.New("the memory peak cannot be reset here (cgroup v2)")

// ResetMemoryPeak starts the group's memory peak over from its use now,
// so that the next Stats says what was used at most since (a server
// session's exec). The peak before is gone: a caller that needs it reads
// Stats first. On v2 it returns ErrPeakNotResettable and changes nothing.
func (g *Group) ResetMemoryPeak() error {
	if g.deleted {
		return fmt.Errorf("cgroup %s: reset memory peak: the group is deleted", g.name)
	}
	if g.mode != V1 {
		return ErrPeakNotResettable
	}
	if g.memDir == "" {
		return fmt.Errorf("cgroup %s: reset memory peak: no memory hierarchy", g.name)
	}
	// Writing 0 sets max_usage to the usage now (mem_cgroup_reset).
	if err := writeFile(filepath.Join(g.memDir, "memory.max_usage_in_bytes"), "0"); err != nil {
		return fmt.Errorf("cgroup %s: reset memory peak: %w", g.name, err)
	}
	err := writeFile(filepath.Join(g.memDir, "memory.kmem.tcp.max_usage_in_bytes"), "0")
	if err != nil && !errors.Is(err, errMissing) {
		return fmt.Errorf("cgroup %s: reset memory peak: %w", g.name, err)
	}
	return nil
}
