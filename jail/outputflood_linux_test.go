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

// A jail flooding stdout makes stockade drop what is past --output-limit,
// on the host's CPU outside the jail's cgroup: reading it 32 KiB at a
// time cost stockade 0.6-1.2 s in 4 s at --cpus 0.2, on top of the
// jail's 800 ms. Past the limit the output is now spliced to /dev/null
// from a 1 MiB pipe and the dropping is paced so that the jail and it
// together stay within the jail's limit (the jail waits on its full
// pipe). Measured as the host sees it: stockade's own CPU (every thread,
// read from the exited process before it is reaped) plus the jail's
// cgroup counter. The rusage after wait4, as TestAttackRefusedSyscallLoopCPU
// uses, is logged too, but it counts the jail's Python only when the
// jail's init reaped it before dying, which a killed flood often is not.
func TestAttackOutputFloodHostCPU(t *testing.T) {
	testenv.NeedJail(t)
	bin := testenv.NeedBinary(t, "the cost is measured on a stockade process")
	const cpus, wall, limit = 0.2, 4 * time.Second, 1 << 20
	cmd := exec.Command(bin, "run", "--json", "--cpus", "0.2", "--timeout", "4s", "--output-limit", "1M", "--", "python3", "-c", outputFlood)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	proctest.Group(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// exitedCPU waits for the exit itself, so the deadline is a kill.
	d := proctest.Budget(t, jailDeadline(wall))
	stop := proctest.KillAfter(cmd, d)
	self, selfErr := exitedCPU(cmd.Process.Pid)
	err := cmd.Wait()
	if stop() {
		t.Fatalf("stockade run --timeout 4s still running after %v: killed it; stderr %q", d, tail(stderr.String(), 2000))
	}
	if _, ok := proctest.ExitCode(err); !ok {
		t.Fatal(err)
	}
	if selfErr != nil {
		t.Fatal(selfErr)
	}
	out := stdout.Bytes()
	var r Result
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("result %.200q: %v", out, err)
	}
	reaped := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	jailCPU := time.Duration(r.CPUMs * float64(time.Millisecond))
	host := self + jailCPU
	budget := time.Duration(cpus * float64(wall))
	t.Logf("verdict %s; in %v: stockade itself %v + the jail %v = %v (limit %v; rusage after wait4 %v); %d bytes written, %d kept",
		r.Verdict, wall, self, jailCPU, host, budget, reaped, r.StdoutBytes, len(r.Stdout))
	if r.Verdict != VerdictTimeout {
		t.Fatalf("verdict %s, want timeout: %+v", r.Verdict, r.Error)
	}
	// What is kept and counted must not change with how the rest is
	// dropped.
	if len(r.Stdout) != limit || strings.Trim(r.Stdout, "x") != "" || !r.StdoutTruncated || r.StdoutBytes <= limit {
		t.Fatalf("stdout: %d bytes kept (want %d of x), truncated %v, %d bytes counted", len(r.Stdout), limit, r.StdoutTruncated, r.StdoutBytes)
	}
	if r.StdoutBytes < 100*limit {
		// Under emulation (make vmtest's qemu TCG) Python may barely
		// start in time; the cost of starting dominates.
		t.Skipf("only %d bytes written in %v: this machine is too slow to judge the drain's share", r.StdoutBytes, wall)
	}
	if host > budget*5/4 {
		t.Fatalf("stockade and its jail cost the host %v of CPU in %v, more than the jail's limit of %v", host, wall, budget)
	}
}

// exitedCPU waits for process pid to exit, leaves it unreaped, and returns
// the user+system CPU of all its threads, not counting its children, from
// /proc/pid/stat (a zombie keeps its totals there until reaped).
func exitedCPU(pid int) (time.Duration, error) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err == nil {
			break
		}
		if err != unix.EINTR {
			return 0, fmt.Errorf("waitid %d: %w", pid, err)
		}
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
