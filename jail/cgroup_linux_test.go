package jail

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/testenv"
)

// ranBy reports whether a run directory or cgroup name is of a run made by
// process pid (named [stockade.]r<slot>-<pid>-<random>).
func ranBy(name string, pid int) bool {
	name = strings.TrimPrefix(name, "stockade.")
	slot, rest, ok := strings.Cut(name, "-")
	return ok && strings.HasPrefix(slot, "r") && strings.HasPrefix(rest, strconv.Itoa(pid)+"-")
}

// stockadeCgroups lists the cgroups this process's runs made below its own
// cgroup in every hierarchy (v1 and v2 alike: /proc/self/cgroup names them
// all). Other stockades' live groups, such as those of test binaries
// running beside this one, are theirs.
func stockadeCgroups(t *testing.T) []string {
	t.Helper()
	return stockadeCgroupsOf(t, os.Getpid())
}

// stockadeCgroupsOf lists the cgroups runs of process pid made below this
// process's own cgroups (a child test process shares them).
func stockadeCgroupsOf(t *testing.T, pid int) []string {
	t.Helper()
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var found []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		var mnt string
		switch {
		case parts[1] == "":
			mnt = "/sys/fs/cgroup"
			if _, err := os.Stat("/sys/fs/cgroup/unified/cgroup.procs"); err == nil {
				mnt = "/sys/fs/cgroup/unified"
			}
		case strings.HasPrefix(parts[1], "name="):
			continue
		default:
			mnt = "/sys/fs/cgroup/" + strings.Split(parts[1], ",")[0]
		}
		// stockade may have moved itself into <own>/supervisor (v2): look
		// one level up as well.
		for _, dir := range []string{filepath.Join(mnt, parts[2]), filepath.Dir(filepath.Join(mnt, parts[2]))} {
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				if e.IsDir() && ranBy(e.Name(), pid) {
					found = append(found, filepath.Join(dir, e.Name()))
				}
			}
		}
	}
	return found
}

func noLeftoverCgroups(t *testing.T) {
	t.Helper()
	if left := stockadeCgroups(t); len(left) > 0 {
		t.Errorf("cgroups left behind: %v", left)
	}
}

func TestMemoryLimitKills(t *testing.T) {
	testenv.NeedJail(t)
	s := py("b = bytearray(1 << 30); print('allocated')")
	s.Cgroup.MemoryMax = 256 << 20
	r := mustRun(t, s)
	if r.Verdict != VerdictMemory || r.ExitCode != 137 || r.Stdout != "" {
		t.Fatalf("1 GiB at a 256M limit: %+v", r)
	}
	if r.PeakMemoryBytes > 300<<20 || r.PeakMemoryBytes < 100<<20 {
		t.Errorf("peak memory %d, want close to the 256M limit", r.PeakMemoryBytes)
	}
	if r.Cgroup != "v1" && r.Cgroup != "v2" {
		t.Errorf("cgroup mode %q", r.Cgroup)
	}
	noLeftoverCgroups(t)
}

func TestCaughtMemoryErrorIsNotAKill(t *testing.T) {
	testenv.NeedJail(t)
	// With RLIMIT_AS nothing would be left to report; here Python's own
	// allocation of a huge object fails cleanly before the cgroup is hit.
	s := py("try:\n    b = bytearray(1 << 46)\nexcept MemoryError:\n    print('caught')")
	s.Cgroup.MemoryMax = 256 << 20
	r := mustRun(t, s)
	if r.Verdict != VerdictOK || r.Stdout != "caught\n" {
		t.Fatalf("%+v", r)
	}
}

func TestForkBombIsHeld(t *testing.T) {
	testenv.NeedJail(t)
	s := py(`
import os, time
n = 0
try:
    while True:
        if os.fork() == 0:
            time.sleep(30); os._exit(0)
        n += 1
except OSError as e:
    print("held after", n)
`)
	s.Cgroup.PidsMax = 32
	s.Timeout = 10 * time.Second
	start := time.Now()
	r := mustRun(t, s)
	if r.Verdict != VerdictPids || !strings.HasPrefix(r.Stdout, "held after") {
		t.Fatalf("%+v", r)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(r.Stdout, "held after")))
	if n >= 32 {
		t.Errorf("forked %d children under a limit of 32 tasks", n)
	}
	if time.Since(start) > 8*time.Second {
		t.Errorf("took %v: the bomb's children were not killed with the run", time.Since(start))
	}
	// The host is unharmed: the next run works at once.
	if r := mustRun(t, py("print('next')")); r.Stdout != "next\n" {
		t.Fatalf("next run: %+v", r)
	}
	noLeftoverCgroups(t)
}

func TestCPUTimeLimit(t *testing.T) {
	testenv.NeedJail(t)
	s := py("while True: pass")
	s.Cgroup.CPUTime = time.Second
	s.Timeout = 20 * time.Second
	r := mustRun(t, s)
	if r.Verdict != VerdictCPU || r.ExitCode != ExitTimeout {
		t.Fatalf("%+v", r)
	}
	if r.CPUMs < 900 || r.CPUMs > 2500 {
		t.Errorf("cpu_ms %.0f for a 1s CPU limit", r.CPUMs)
	}
	noLeftoverCgroups(t)
}

// quotaSpinner spins for 2 s and prints the share of a core it got, as
// it saw it: its own CPU time over the wall time of the loop. The run's
// cpu_ms over wall_ms would also count init's set-up before the clock
// starts (on v2 init is cloned into the cgroup), which in the VM's
// emulation alone made a 0.5 quota look like 0.71.
const quotaSpinner = `import time
t0, c0 = time.monotonic(), time.process_time()
while time.monotonic() < t0 + 2: pass
print("%.3f" % ((time.process_time() - c0) / (time.monotonic() - t0)))`

func TestCPUQuotaHalvesASpinner(t *testing.T) {
	testenv.NeedJail(t)
	spin := func(cpus float64) float64 {
		s := py(quotaSpinner)
		s.Cgroup.CPUs = cpus
		r := mustRun(t, s)
		share, err := strconv.ParseFloat(strings.TrimSpace(r.Stdout), 64)
		if r.Verdict != VerdictOK || err != nil {
			t.Fatalf("--cpus %v: %+v", cpus, r)
		}
		// The host's counter saw at least what the spinner did.
		if r.CPUMs < share*2000*0.9 {
			t.Errorf("--cpus %v: the cgroup counted %.0f ms, the spinner used %.0f", cpus, r.CPUMs, share*2000)
		}
		return share
	}
	share := spin(0.5)
	if share > 0.6 {
		t.Fatalf("--cpus 0.5: the spinner got %.2f cores", share)
	}
	if share >= 0.3 {
		return
	}
	// Below the quota: too strict a quota, or a host too busy to give even
	// half a core. The same spinner with two cores' worth tells which.
	free := spin(2)
	if free < 0.7 {
		t.Skipf("the host is too busy to judge a quota: --cpus 0.5 got %.2f cores, --cpus 2 got %.2f", share, free)
	}
	t.Errorf("--cpus 0.5: the spinner got %.2f cores, while with --cpus 2 it got %.2f", share, free)
}

func TestUnwritableCgroupParentFails(t *testing.T) {
	testenv.NeedJail(t)
	s := spec("true")
	s.Host.CgroupParent = "/stockade-test-does-not-exist/deeper"
	res, err := runJail(t, s, Streams{})
	if err == nil || res.ExitCode != ExitJailError || !strings.Contains(err.Error(), "cgroup") {
		t.Fatalf("unusable --cgroup-parent: %v, exit %d", err, res.ExitCode)
	}
}

func TestNoCgroupIsReported(t *testing.T) {
	testenv.NeedJail(t)
	s := spec("true")
	s.Host.NoCgroup = true
	r := mustRun(t, s)
	if r.Cgroup != "none" || len(r.Degraded) == 0 || !strings.Contains(strings.Join(r.Degraded, " "), "cgroup") {
		t.Fatalf("%+v", r)
	}
}

// numpy works under a pids limit of 16 (its BLAS pools are held to one
// thread), and in that same jail the limit is in force: threads past it
// fail. Without the second half the test passed with no limit at all.
func TestNumpyUnderPidsLimit(t *testing.T) {
	testenv.NeedJail(t)
	if _, err := os.Stat("/usr/lib/python3/dist-packages/numpy"); err != nil {
		t.Skip("python3-numpy is not installed")
	}
	s := py(`
import threading, numpy
print(numpy.linalg.inv(numpy.eye(3)).trace(), flush=True)
hold, n = threading.Event(), 0
try:
    while n < 64:
        threading.Thread(target=hold.wait, daemon=True).start()
        n += 1
except RuntimeError:
    pass
hold.set()
print("threads", n)
`)
	s.Cgroup.PidsMax = 16
	r := mustRun(t, s)
	var threads int
	fmt.Sscanf(strings.TrimPrefix(r.Stdout, "3.0\n"), "threads %d", &threads)
	if !strings.HasPrefix(r.Stdout, "3.0\n") || threads == 0 {
		t.Fatalf("numpy under 16 pids: %+v", r)
	}
	if threads >= 16 || r.Verdict != VerdictPids {
		t.Fatalf("under a pids limit of 16 the jail started %d more threads, verdict %s: the limit was not in force", threads, r.Verdict)
	}
}
