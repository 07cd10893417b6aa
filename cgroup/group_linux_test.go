package cgroup

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCreateWritesLimits reads every limit back from the kernel's files.
func TestCreateWritesLimits(t *testing.T) {
	m := isolatedManager(t, "")
	l := Limits{MemoryMax: 256 << 20, SwapMax: 0, CPUs: 0.5, PidsMax: 64}
	g := createGroup(t, m, l)
	for _, d := range g.dirs {
		if !strings.HasPrefix(filepath.Base(d), groupPrefix+"test-") {
			t.Errorf("group dir %s is not named stockade.<id>", d)
		}
	}
	want := map[string]string{}
	if m.Mode() == V1 {
		want[filepath.Join(g.memDir, "memory.limit_in_bytes")] = "268435456"
		if m.swap {
			want[filepath.Join(g.memDir, "memory.memsw.limit_in_bytes")] = "268435456" // memory+swap, swap 0
		}
		want[filepath.Join(g.cpuDir, "cpu.cfs_period_us")] = "100000"
		want[filepath.Join(g.cpuDir, "cpu.cfs_quota_us")] = "50000"
		want[filepath.Join(g.pidsDir, "pids.max")] = "64"
		if len(g.dirs) < 4 {
			t.Errorf("v1 group is in %d hierarchies (%v), want memory, cpu, cpuacct and pids at least", len(g.dirs), g.dirs)
		}
	} else {
		want[filepath.Join(g.memDir, "memory.max")] = "268435456"
		if m.swap {
			want[filepath.Join(g.memDir, "memory.swap.max")] = "0"
		}
		want[filepath.Join(g.cpuDir, "cpu.max")] = "50000 100000"
		want[filepath.Join(g.pidsDir, "pids.max")] = "64"
	}
	for file, v := range want {
		if got := readTrim(t, file); got != v {
			t.Errorf("%s = %q, want %q", file, got, v)
		}
	}
}

// TestCreateWithoutLimitsLeavesDefaults checks that zero means "no limit"
// rather than "limit 0".
func TestCreateWithoutLimitsLeavesDefaults(t *testing.T) {
	m := isolatedManager(t, "")
	g := createGroup(t, m, Limits{})
	file := filepath.Join(g.pidsDir, "pids.max")
	if got := readTrim(t, file); got != "max" {
		t.Errorf("%s = %q, want max", file, got)
	}
}

func TestCreateRejectsBadInput(t *testing.T) {
	m := isolatedManager(t, "")
	for _, id := range []string{"", "a/b", "..", "x\x00"} {
		if g, err := m.Create(id, Limits{}); err == nil {
			g.Delete()
			t.Errorf("Create(%q) succeeded", id)
		}
	}
	if g, err := m.Create("neg", Limits{MemoryMax: -1}); err == nil {
		g.Delete()
		t.Error("Create with negative memory succeeded")
	}
	// Nothing may be left from the refused attempts.
	for _, h := range m.hiers {
		if names, _ := stockadeGroups(h.parent); len(names) > 0 {
			t.Errorf("left behind in %s: %v", h.parent, names)
		}
	}
}

// TestCreateFailsClosed makes one limit write fail (a quota the kernel
// refuses after our own validation) and checks that the error names it and
// that nothing of the group is left.
func TestCreateFailsClosed(t *testing.T) {
	m := isolatedManager(t, "")
	// The kernel caps the quota at 2^44-1 us (max_cfs_runtime); 2e8 cpus
	// passes our validation but asks for 2e13 us per period.
	_, err := m.Create("failclosed", Limits{MemoryMax: 64 << 20, CPUs: 2e8})
	if err == nil {
		t.Fatal("Create accepted a CPU quota the kernel refuses")
	}
	if !strings.Contains(err.Error(), "cpu limit") || !strings.Contains(err.Error(), "cpu.") {
		t.Errorf("error does not name the limit and file: %v", err)
	}
	for _, d := range dirsOf(m, groupPrefix+"failclosed") {
		if exists(d) {
			t.Errorf("failed Create left %s", d)
		}
	}
}

// TestAddProcStatsKillDelete follows one run's life: place, run, read
// stats, kill, remove.
func TestAddProcStatsKillDelete(t *testing.T) {
	m := isolatedManager(t, "")
	g := createGroup(t, m, Limits{MemoryMax: 128 << 20, CPUs: 1, PidsMax: 16})
	p := startInGroup(t, g, false, false, "/bin/sleep", "60")
	pid := p.cmd.Process.Pid
	if !inGroup(t, pid, g) {
		t.Fatalf("pid %d is not in %s in every hierarchy", pid, g.name)
	}
	p.release(t)
	time.Sleep(50 * time.Millisecond) // let sh exec sleep
	st, err := g.Stats()
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	if st.MemoryPeak == 0 {
		t.Errorf("MemoryPeak = 0 with a process in the group")
	}
	if exists(filepath.Join(g.pidsDir, "pids.peak")) && st.PidsPeak != 1 {
		t.Errorf("PidsPeak = %d, want 1 (sh exec'd sleep)", st.PidsPeak)
	}
	if st.OOMKills != 0 || st.PidsLimitHit {
		t.Errorf("limits reported hit for an idle sleep: %+v", st)
	}
	if err := g.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if err := p.wait(t, 5*time.Second); !killedBySIGKILL(err) {
		t.Errorf("sleep ended with %v, want SIGKILL", err)
	}
	if left, _ := g.procsLeft(); len(left) != 0 {
		t.Errorf("processes left after Kill: %v", left)
	}
	dirs := append([]string(nil), g.dirs...)
	if err := g.Delete(); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	for _, d := range dirs {
		if exists(d) {
			t.Errorf("Delete left %s", d)
		}
	}
	if err := g.Delete(); err != nil {
		t.Errorf("second Delete: %v", err)
	}
	if _, err := g.Stats(); err == nil {
		t.Error("Stats after Delete returned no error")
	}
}

// TestDeleteKillsWhatIsLeft deletes a group that still holds a process.
func TestDeleteKillsWhatIsLeft(t *testing.T) {
	m := isolatedManager(t, "")
	g := createGroup(t, m, Limits{})
	p := startInGroup(t, g, false, false, "/bin/sleep", "60")
	p.release(t)
	if err := g.Delete(); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := p.wait(t, 5*time.Second); !killedBySIGKILL(err) {
		t.Errorf("sleep ended with %v, want SIGKILL", err)
	}
}

// TestMemoryHogIsOOMKilled allocates and touches 1 GiB under a 256 MiB limit.
func TestMemoryHogIsOOMKilled(t *testing.T) {
	m := isolatedManager(t, "")
	if !m.SwapLimited() {
		t.Skip("swap is not limited here; the hog could swap instead of being killed")
	}
	const limit = 256 << 20
	g := createGroup(t, m, Limits{MemoryMax: limit, PidsMax: 16})
	// bytes * n is a memset, so every page is really touched.
	p := startInGroup(t, g, false, false, python, "-c", "b = b'x' * (1 << 30); print(len(b))")
	p.release(t)
	if err := p.wait(t, 30*time.Second); !killedBySIGKILL(err) {
		t.Fatalf("hog ended with %v, want SIGKILL by the OOM killer", err)
	}
	st, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.OOMKills == 0 {
		t.Errorf("OOMKills = 0 after an OOM kill: %+v", st)
	}
	if !st.MemoryLimitHit {
		t.Errorf("MemoryLimitHit = false: %+v", st)
	}
	if st.MemoryPeak > limit+(1<<20) || st.MemoryPeak < limit/2 {
		t.Errorf("MemoryPeak = %d, want close to and not above the %d limit", st.MemoryPeak, limit)
	}
}

// TestForkBombHeldAtPidsMax runs a real fork bomb (every process forks
// forever) and checks it never gets past pids.max and that Kill ends it.
func TestForkBombHeldAtPidsMax(t *testing.T) {
	m := isolatedManager(t, "")
	const pidsMax = 24
	g := createGroup(t, m, Limits{PidsMax: pidsMax, MemoryMax: 512 << 20})
	bomb := "import os, time\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        time.sleep(0.001)\n"
	p := startInGroup(t, g, false, true, python, "-c", bomb)
	p.release(t)
	deadline := time.Now().Add(5 * time.Second)
	highest := 0
	for time.Now().Before(deadline) {
		n, err := strconv.Atoi(readTrim(t, filepath.Join(g.pidsDir, "pids.current")))
		if err != nil {
			t.Fatal(err)
		}
		if n > pidsMax {
			t.Fatalf("pids.current = %d above pids.max %d", n, pidsMax)
		}
		highest = max(highest, n)
		if st, _ := g.Stats(); st.PidsLimitHit && highest == pidsMax {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	st, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if !st.PidsLimitHit {
		t.Errorf("PidsLimitHit = false; the bomb reached %d of %d", highest, pidsMax)
	}
	if exists(filepath.Join(g.pidsDir, "pids.peak")) && st.PidsPeak != pidsMax {
		t.Errorf("PidsPeak = %d, want exactly pids.max %d", st.PidsPeak, pidsMax)
	}
	start := time.Now()
	if err := g.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	t.Logf("killed the bomb in %v", time.Since(start))
	if err := p.wait(t, 5*time.Second); !killedBySIGKILL(err) {
		t.Errorf("bomb ended with %v, want SIGKILL", err)
	}
	if left, _ := g.procsLeft(); len(left) != 0 {
		t.Errorf("processes left after Kill: %v", left)
	}
}

// TestCPULimitAndUsage spins for one wall second at half a CPU.
func TestCPULimitAndUsage(t *testing.T) {
	m := isolatedManager(t, "")
	g := createGroup(t, m, Limits{CPUs: 0.5})
	p := startInGroup(t, g, false, false, python, "-c", "import time\nt = time.time()\nwhile time.time() - t < 1: pass")
	start := time.Now()
	p.release(t)
	if err := p.wait(t, 20*time.Second); err != nil {
		t.Fatalf("spinner: %v", err)
	}
	wall := time.Since(start) // Python's start-up counts too, and is slow under emulation
	used, err := g.CPUUsage()
	if err != nil {
		t.Fatal(err)
	}
	st, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%v wall at 0.5 cpus used %v (user %v, system %v)", wall, used, st.UserCPU, st.SystemCPU)
	// At most half the wall time, plus one 100ms period of slack for the
	// quota's granularity; unlimited, the spinner would use all of it.
	if used < 50*time.Millisecond || used > wall/2+cfsPeriod {
		t.Errorf("CPU usage %v in %v wall at 0.5 cpus; want at most %v", used, wall, wall/2+cfsPeriod)
	}
	if st.CPUUsage < used || st.UserCPU+st.SystemCPU > st.CPUUsage+100*time.Millisecond {
		t.Errorf("Stats CPU %v / user %v / system %v disagree with CPUUsage %v", st.CPUUsage, st.UserCPU, st.SystemCPU, used)
	}
}

// TestConcurrentCreate makes many groups at once under one manager, as
// parallel runs do.
func TestConcurrentCreate(t *testing.T) {
	m := isolatedManager(t, "")
	errs := make(chan error, 16)
	for i := range 16 {
		go func() {
			g, err := m.Create("conc-"+strconv.Itoa(os.Getpid())+"-"+strconv.Itoa(i), Limits{PidsMax: 8})
			if err == nil {
				err = g.Delete()
			}
			errs <- err
		}()
	}
	for range 16 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
