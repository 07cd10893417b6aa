package jail

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/proctest"
	"github.com/stockade/stockade/internal/testenv"
	"golang.org/x/sys/unix"
)

// outputFlood writes to stdout as fast as it can until the run is stopped.
const outputFlood = `
import os
b = b"x" * (1 << 20)
while True:
    os.write(1, b)
`

// floodBytes is what TestAttackOutputFloodIsNotCopiedOrHeld's jail writes:
// 128 times the output limit, so that a drain which copied or kept what
// it drops would show it many times over its own bounds.
const floodBytes = 128 << 20

// TestAttackOutputFloodIsNotCopiedOrHeld: a jail writing far past
// --output-limit makes stockade, outside the jail's cgroup, drop the rest.
// Reading it through stockade's memory 32 KiB at a time cost stockade as
// much CPU as the jail spent writing (0.6-1.2 s in 4 s at --cpus 0.2); so
// past the limit it is spliced to /dev/null from the jail's 1 MiB pipe,
// never read, and never held. Judged by counts the host keeps, which do not
// depend on the machine's speed or load: the bytes stockade read(2) (its
// /proc/PID/io rchar, read from the exited process before it is reaped)
// stay about the limit while the jail writes 128 times as much, its own
// peak RSS (VmHWM: 28 MB here, Go's own) stays below half the flood, and every byte
// written is counted. What
// the dropping costs in CPU time is a benchmark:
// BenchmarkOutputFloodHostCPU, run by make bench. The pacing that keeps it
// within --cpus is held by TestDrainPaceSpendsWithinItsRate.
func TestAttackOutputFloodIsNotCopiedOrHeld(t *testing.T) {
	testenv.NeedJail(t)
	bin := testenv.NeedBinary(t, "the bytes are counted on a stockade process")
	const limit = 1 << 20
	flood := fmt.Sprintf("import os\nb = b'x' * %d\nfor _ in range(%d):\n    os.write(1, b)\n", limit, floodBytes/limit)
	cmd := exec.Command(bin, "run", "--json", "--cpus", "0.2", "--timeout", "300s", "--output-limit", "1M", "--", "python3", "-c", flood)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	proctest.Group(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := proctest.Budget(t, jailDeadline(300*time.Second))
	stop := proctest.KillAfter(cmd, d)
	exited := make(chan struct{})
	peakSeen := sampleHWM(cmd.Process.Pid, exited)
	read, readErr := exitedRead(cmd.Process.Pid)
	close(exited)
	peak := <-peakSeen
	err := cmd.Wait()
	if stop() {
		t.Fatalf("stockade run --timeout 300s still running after %v: killed it; stderr %q", d, tail(stderr.String(), 2000))
	}
	if _, ok := proctest.ExitCode(err); !ok {
		t.Fatal(err)
	}
	if readErr != nil {
		t.Fatal(readErr)
	}
	var r Result
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("result %.200q: %v; stderr %q", stdout.Bytes(), err, tail(stderr.String(), 2000))
	}
	t.Logf("verdict %s: %d bytes written, %d kept; stockade read %d bytes, its peak RSS %d",
		r.Verdict, r.StdoutBytes, len(r.Stdout), read, peak)
	if r.Verdict != VerdictOutput {
		t.Fatalf("verdict %s, want output: %+v; stderr %q", r.Verdict, r.Error, tail(stderr.String(), 2000))
	}
	if len(r.Stdout) != limit || strings.Trim(r.Stdout, "x") != "" || !r.StdoutTruncated || r.StdoutBytes != floodBytes {
		t.Fatalf("stdout: %d bytes kept (want %d of x), truncated %v, %d bytes counted (want %d)",
			len(r.Stdout), limit, r.StdoutTruncated, r.StdoutBytes, floodBytes)
	}
	// The kept megabyte is read, and stockade reads a few hundred KiB of
	// its own (the profile, /proc, the cgroup's files): 1.3 MB here.
	if read > 16<<20 {
		t.Errorf("stockade read %d bytes for a flood of %d past a limit of %d: what it drops went through it", read, floodBytes, limit)
	}
	if peak == 0 || peak > 64<<20 {
		t.Errorf("stockade's peak RSS %d (0: never read) for a flood of %d: what it drops was held", peak, floodBytes)
	}
}

// BenchmarkOutputFloodHostCPU: what a jail flooding stdout for 4 s at
// --cpus 0.2 costs the host, stockade's own CPU (every thread, read from
// the exited process before it is reaped) plus the jail's cgroup counter,
// as a fraction of the jail's limit (cpu/limit; the drain is paced to keep
// it near 1). A time, so a benchmark (make bench), never a check: on a
// loaded or emulated machine it measures the machine (issue 28: 0 bytes
// were written in 4 s under the v2 VM's TCG at a load of 20).
func BenchmarkOutputFloodHostCPU(b *testing.B) {
	testenv.NeedJail(b)
	bin := testenv.NeedBinary(b, "the cost is measured on a stockade process")
	const cpus, wall = 0.2, 4 * time.Second
	var ratio, written float64
	for range b.N {
		cmd := exec.Command(bin, "run", "--json", "--cpus", "0.2", "--timeout", "4s", "--output-limit", "1M", "--", "python3", "-c", outputFlood)
		var stdout bytes.Buffer
		cmd.Stdout = &stdout
		proctest.Group(cmd)
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		stop := proctest.KillAfter(cmd, jailDeadline(wall))
		self, selfErr := exitedCPU(cmd.Process.Pid)
		err := cmd.Wait()
		if stop() {
			b.Fatal("stockade run --timeout 4s outlived its deadline")
		}
		if _, ok := proctest.ExitCode(err); !ok || selfErr != nil {
			b.Fatal(err, selfErr)
		}
		var r Result
		if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
			b.Fatalf("result %.200q: %v", stdout.Bytes(), err)
		}
		host := self + time.Duration(r.CPUMs*float64(time.Millisecond))
		ratio += float64(host) / (cpus * float64(wall))
		written += float64(r.StdoutBytes)
	}
	b.ReportMetric(ratio/float64(b.N), "cpu/limit")
	b.ReportMetric(written/float64(b.N)/(1<<20), "MiB-written")
}

// exitedRead waits for process pid to exit, leaves it unreaped, and
// returns the bytes it read with read(2) and its kind (rchar of
// /proc/pid/io, which splice does not add to), all its threads together.
func exitedRead(pid int) (int64, error) {
	if err := waitExited(pid); err != nil {
		return 0, err
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "rchar: "); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/io has no rchar: %q", pid, b)
}

// sampleHWM reads process pid's own peak RSS (VmHWM) every 10 ms until
// exited is closed, and then sends the last value read. Its own: the
// rusage of a waited child is the largest of it and every descendant it
// reaped, among them a jail that builds matplotlib's font cache on a
// fresh root (70 MB), which is not stockade holding output. VmHWM only
// grows, and a drain that held what it drops would hold it while the
// flood lasts, so a sample taken before the exit sees it.
func sampleHWM(pid int, exited <-chan struct{}) <-chan int64 {
	out := make(chan int64, 1)
	go func() {
		var last int64
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
				for _, line := range strings.Split(string(b), "\n") {
					if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
						if kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64); err == nil {
							last = kb << 10
						}
					}
				}
			}
			select {
			case <-exited:
				out <- last
				return
			case <-tick.C:
			}
		}
	}()
	return out
}

// waitExited waits for process pid to exit and leaves it unreaped.
func waitExited(pid int) error {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err == nil {
			return nil
		}
		if err != unix.EINTR {
			return fmt.Errorf("waitid %d: %w", pid, err)
		}
	}
}

// exitedCPU waits for process pid to exit, leaves it unreaped, and returns
// the user+system CPU of all its threads, not counting its children, from
// /proc/pid/stat (a zombie keeps its totals there until reaped).
func exitedCPU(pid int) (time.Duration, error) {
	if err := waitExited(pid); err != nil {
		return 0, err
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command's closing parenthesis start at field 3;
	// utime and stime are fields 14 and 15, in clock ticks (100 a second
	// on Linux's user ABI).
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, b)
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %q: %w", pid, s, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// TestDrainPaceSpendsWithinItsRate: the drain that drops a flood, and the
// jail it drains, may together spend no more than the jail's --cpus over
// the wall time that passed, plus one burst. The bucket is driven with
// charges as fast as it lets them through, for 300 ms of this machine's
// time, with the jail idle and with the jail using half its limit; what
// was let through is compared with the rate times the time that did pass,
// so a slow or loaded machine only lets less through. Without the pacing
// the drain spent whatever the flood cost it, outside the jail's cgroup.
func TestDrainPaceSpendsWithinItsRate(t *testing.T) {
	const rate = 0.2
	const charge = 500 * time.Microsecond
	for _, busy := range []bool{false, true} {
		start := time.Now()
		jail := func() (time.Duration, error) {
			if !busy {
				return 0, nil
			}
			// Half the limit: a jail that took it all would leave the
			// drain in debt for good (the real one blocks on its full
			// pipe instead, and uses nothing).
			return time.Duration(float64(time.Since(start)) * rate / 2), nil
		}
		p := newDrainPace(rate, jail, make(chan struct{}))
		var charged time.Duration
		for time.Since(start) < 300*time.Millisecond {
			p.spend(charge)
			charged += charge
		}
		elapsed := time.Since(start)
		p.mu.Lock()
		jailSeen := p.jailUsed
		p.mu.Unlock()
		allowed := drainBurst + time.Duration(float64(elapsed)*rate)
		t.Logf("jail busy %v: %v charged and %v of the jail's seen in %v (allowed %v)", busy, charged, jailSeen, elapsed, allowed)
		if charged+jailSeen > allowed+time.Microsecond {
			t.Errorf("jail busy %v: the drain let %v through and saw the jail use %v in %v, more than %v at --cpus %v",
				busy, charged, jailSeen, elapsed, allowed, rate)
		}
		if busy && jailSeen == 0 {
			t.Errorf("the jail's own CPU was never read")
		}
	}
}
