package jail

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/proctest"
	"github.com/stockade/stockade/internal/runlock"
	"github.com/stockade/stockade/internal/testenv"
)

// soakKind is one kind of run in the soak mix, with the verdict it must end in.
type soakKind struct {
	name    string
	verdict Verdict
	spec    func(marker string) Spec
}

// soakPy is a python3 -c run carrying marker in its command line (and so in
// every forked child's), for the survivor scan.
func soakPy(code, marker string) Spec {
	return spec("python3", "-c", code, marker)
}

var soakKinds = []soakKind{
	{"normal", VerdictOK, func(m string) Spec { return soakPy("print(sum(range(100)))", m) }},
	{"timeout", VerdictTimeout, func(m string) Spec {
		s := soakPy("while True: pass", m)
		s.Timeout = 300 * time.Millisecond
		return s
	}},
	{"oom", VerdictMemory, func(m string) Spec {
		s := soakPy("b = [bytearray(8 << 20) for _ in range(64)]", m)
		s.Cgroup.MemoryMax = 64 << 20
		return s
	}},
	{"forkbomb", VerdictPids, func(m string) Spec {
		s := soakPy("import os, time\nwhile True:\n    if os.fork() == 0:\n        time.sleep(30); os._exit(0)", m)
		s.Cgroup.PidsMax = 16
		return s
	}},
	{"flood", VerdictOutput, func(m string) Spec {
		s := soakPy("import os\nfor _ in range(64): os.write(1, b'x' * 65536)", m)
		s.OutputLimit = 4096
		return s
	}},
}

// soakMix picks run i's kind: half normal runs, the rest spread over the
// limits.
func soakMix(i int) soakKind {
	if i%2 == 0 {
		return soakKinds[0]
	}
	return soakKinds[1+(i/2)%(len(soakKinds)-1)]
}

// ownLeftovers lists what runs of process pid left on the host: cgroups and
// run directories carry the pid of the stockade that made them as a label,
// so other test processes' concurrent runs do not count.
func ownLeftovers(t *testing.T, pid int) []string {
	t.Helper()
	var left []string
	for _, cg := range stockadeCgroupsOf(t, pid) {
		left = append(left, "cgroup "+cg)
	}
	base := RunBase()
	ents, _ := os.ReadDir(base)
	for _, e := range ents {
		if ranBy(e.Name(), pid) {
			left = append(left, "run dir "+filepath.Join(base, e.Name()))
		}
	}
	return left
}

func mountCount(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(b, []byte("\n"))
}

func openFDs() int {
	ents, _ := os.ReadDir("/proc/self/fd")
	return len(ents)
}

func rssKiB() int64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// waitGone polls until marker is on no host process, or says who is left.
func waitGone(marker string, within time.Duration) []string {
	deadline := time.Now().Add(within)
	for {
		left := markerProcs(marker)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// TestSoak runs STOCKADE_SOAK jails (200 by default) eight at a time, a mix
// of normal runs and every limit, and checks that each ended as it should
// and that nothing of any of them is left: process, cgroup, mount, run
// directory, file descriptor, goroutine or memory of ours.
func TestSoak(t *testing.T) {
	testenv.NeedJail(t)
	if testing.Short() {
		t.Skip("soak: skipped under -short")
	}
	n := 200
	if v := os.Getenv("STOCKADE_SOAK"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("STOCKADE_SOAK=%q: want a positive number of runs", v)
		}
	}
	const concurrency = 8
	marker := fmt.Sprintf("stockade-soak-%d", time.Now().UnixNano())

	// Warm up (first-run costs: page cache, the cgroup manager's probes)
	// before the baseline is taken.
	mustRun(t, soakKinds[0].spec(marker))
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	mountsBefore, fdsBefore, goroutinesBefore, rssBefore := mountCount(t), openFDs(), runtime.NumGoroutine(), rssKiB()

	type result struct {
		i       int
		kind    soakKind
		res     *Result
		err     error
		latency time.Duration
	}
	results := make(chan result, n)
	work := make(chan int)
	var wg sync.WaitGroup
	begin := time.Now()
	for w := 0; w < concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				k := soakMix(i)
				start := time.Now()
				s := k.spec(marker)
				ctx, cancel := jailContext(t, s)
				res, err := Run(ctx, s, Streams{})
				cancel()
				results <- result{i, k, res, err, time.Since(start)}
			}
		}()
	}
	for i := 0; i < n; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	elapsed := time.Since(begin)
	close(results)

	var trivial []time.Duration
	counts := map[string]int{}
	bad := 0
	for r := range results {
		counts[r.kind.name]++
		ok := r.err == nil && r.res.Verdict == r.kind.verdict
		if r.kind.name == "normal" {
			ok = ok && r.res.Stdout == "4950\n"
			trivial = append(trivial, r.latency)
			if r.latency > time.Second {
				t.Logf("slow trivial run %d: %v, wall_ms %.0f", r.i, r.latency, r.res.WallMs)
			}
		}
		if !ok {
			if bad++; bad <= 10 {
				t.Errorf("run %d (%s): verdict %s, want %s; err %v; stdout %.80q stderr %.200q",
					r.i, r.kind.name, r.res.Verdict, r.kind.verdict, r.err, r.res.Stdout, r.res.Stderr)
			}
		}
	}
	if bad > 10 {
		t.Errorf("... %d runs in all ended wrongly", bad)
	}
	t.Logf("%d runs (%v) in %v at concurrency %d: %.1f runs/s; trivial run latency p50 %v, p99 %v",
		n, counts, elapsed.Round(time.Millisecond), concurrency, float64(n)/elapsed.Seconds(),
		percentile(trivial, 0.50).Round(time.Millisecond), percentile(trivial, 0.99).Round(time.Millisecond))

	if left := waitGone(marker, 5*time.Second); len(left) > 0 {
		t.Errorf("jailed processes survived: %v", left)
	}
	t.Run("kill-9 in the middle of 20 runs", soakKill9)
	if kids := proctest.Children(os.Getpid()); len(kids) > 0 {
		t.Errorf("children of the test process left: %v", kids)
	}
	if left := ownLeftovers(t, os.Getpid()); len(left) > 0 {
		t.Errorf("left on the host: %v", left)
	}
	// A leak is a mount more; fewer is another process's unmount on a
	// shared host (a network namespace's bind under /run/netns).
	if m := mountCount(t); m > mountsBefore {
		t.Errorf("host mounts went from %d to %d", mountsBefore, m)
	}
	// Goroutines of finished runs (drains, supervisors) may take a moment
	// to return after Run does.
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > goroutinesBefore+2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > goroutinesBefore+2 {
		t.Errorf("goroutines went from %d to %d", goroutinesBefore, g)
	}
	if f := openFDs(); f > fdsBefore+2 {
		t.Errorf("open file descriptors went from %d to %d", fdsBefore, f)
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	rssAfter := rssKiB()
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("load average now (not asserted; stray processes are): %s", strings.TrimSpace(string(load)))
	t.Logf("heap in use %d KiB -> %d KiB, RSS %d KiB -> %d KiB", before.HeapInuse>>10, after.HeapInuse>>10, rssBefore, rssAfter)
	// Loose: captured output is at most 1M per stream per run, and none of
	// it is kept; the bound catches growth per run, not noise.
	if grew := int64(after.HeapInuse) - int64(before.HeapInuse); grew > 64<<20 {
		t.Errorf("heap in use grew by %d MiB over %d runs", grew>>20, n)
	}
	if grew := rssAfter - rssBefore; grew > 256<<10 {
		t.Errorf("RSS grew by %d MiB over %d runs", grew>>10, n)
	}
}

// lockFilesOf returns the run-lock files (device and inode) process pid
// has open. Asked of a stopped process, it is every slot that process and
// any child it was forking can hold.
func lockFilesOf(pid int) map[[2]uint64]bool {
	dir := runlock.DefaultDir() + "/"
	files := map[[2]uint64]bool{}
	fdDir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	fds, _ := os.ReadDir(fdDir)
	for _, fd := range fds {
		l, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
		if err != nil || !strings.HasPrefix(l, dir) {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join(fdDir, fd.Name()), &st) == nil {
			files[[2]uint64{st.Dev, st.Ino}] = true
		}
	}
	return files
}

// stopped reports whether process pid is stopped by a signal.
func stopped(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name's closing parenthesis.
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'T'
}

// waitLockHolders waits until no process but this one has one of files
// open, and returns those that still do. Only these files count: other
// tests' stockades, running beside this one, hold run locks of their own.
func waitLockHolders(files map[[2]uint64]bool, within time.Duration) []string {
	self := strconv.Itoa(os.Getpid())
	deadline := time.Now().Add(within)
	for {
		var holders []string
		procs, _ := os.ReadDir("/proc")
		for _, p := range procs {
			if p.Name() == self {
				continue
			}
			fdDir := filepath.Join("/proc", p.Name(), "fd")
			fds, _ := os.ReadDir(fdDir)
			for _, fd := range fds {
				var st syscall.Stat_t
				if syscall.Stat(filepath.Join(fdDir, fd.Name()), &st) == nil && files[[2]uint64{st.Dev, st.Ino}] {
					holders = append(holders, p.Name())
					break
				}
			}
		}
		if len(holders) == 0 || time.Now().After(deadline) {
			return holders
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// soakLoopEnv makes TestSoakLoopHelper run: it is the stockade that
// TestSoak's kill-9 step kills in the middle of its runs.
const soakLoopEnv = "STOCKADE_SOAK_LOOP"

// TestSoakLoopHelper is not a test on its own: started as a separate
// process by TestSoak's kill-9 step, it makes 20 runs, four at a time,
// printing a line as each starts, until it is killed.
func TestSoakLoopHelper(t *testing.T) {
	marker := os.Getenv(soakLoopEnv)
	if marker == "" {
		t.Skip("helper process for TestSoak's kill-9 step")
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i := 0; i < 20; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			fmt.Printf("run %d\n", i)
			s := spec("python3", "-c", "import os, time\nif os.fork() == 0:\n    os.setsid()\ntime.sleep(2)", marker)
			Run(context.Background(), s, Streams{})
		}()
	}
	wg.Wait()
}

// soakKill9 kills a stockade with SIGKILL in the middle of 20 runs: its
// jails must die with it, and the next run (of another stockade) removes
// the cgroups and run directories it could not.
func soakKill9(t *testing.T) {
	marker := fmt.Sprintf("stockade-kill9-%d", time.Now().UnixNano())
	cmd := exec.Command("/proc/self/exe", "-test.run=^TestSoakLoopHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), soakLoopEnv+"="+marker)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Kill once ten runs have started and four jails are up.
	sc := bufio.NewScanner(out)
	started := 0
	for started < 10 && sc.Scan() {
		if strings.HasPrefix(sc.Text(), "run ") {
			started++
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(markerProcs(marker)) < 4 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	jailed := len(markerProcs(marker))
	if started < 10 || jailed == 0 {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper started %d runs, %d jailed processes seen", started, jailed)
	}
	pid := cmd.Process.Pid
	// Stopped, it forks nothing more: the lock files it holds now are all
	// that it and a child it was forking can hold when the SIGKILL lands.
	cmd.Process.Signal(syscall.SIGSTOP)
	for stop := time.Now().Add(5 * time.Second); !stopped(pid) && time.Now().Before(stop); {
		time.Sleep(time.Millisecond)
	}
	held := lockFilesOf(pid)
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if left := waitGone(marker, 5*time.Second); len(left) > 0 {
		t.Fatalf("jailed processes outlived the killed stockade: %v", left)
	}
	// A child the killed stockade was forking at that moment (an init not
	// yet exec'd) holds copies of all its run locks until the kernel's
	// SIGKILL for its dead parent lands: until then its slots are rightly
	// live, and no sweep may take them.
	if holders := waitLockHolders(held, 5*time.Second); len(holders) > 0 {
		t.Fatalf("processes still hold run locks 5 s after the kill: %v", holders)
	}
	left := ownLeftovers(t, pid)
	t.Logf("killed stockade %d after %d runs started, %d jailed processes up; it left %d cgroups/run dirs", pid, started, jailed, len(left))
	// The next run, by this process, sweeps what the dead one left.
	if r := mustRun(t, spec("true")); r.Verdict != VerdictOK {
		t.Fatalf("next run: %+v", r)
	}
	if left := ownLeftovers(t, pid); len(left) > 0 {
		t.Errorf("the next run did not clean up after the killed stockade: %v", left)
	}
}
