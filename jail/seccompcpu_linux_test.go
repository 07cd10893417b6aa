package jail

import (
	"syscall"
	"testing"
	"time"
)

func selfCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// refusedLoop calls a refused system call (each one a round trip to
// stockade's supervisor) from two threads until the run is stopped.
const refusedLoop = `
import ctypes, threading
libc = ctypes.CDLL(None, use_errno=True)
def loop():
    while True:
        libc.syscall(101, 0, 0, 0, 0)  # ptrace(PTRACE_TRACEME): refused, answered EPERM by stockade
for _ in range(2):
    threading.Thread(target=loop, daemon=True).start()
loop()
`

// A jail looping on refused calls makes stockade's supervisor work for
// it, outside the jail's cgroup: 2.2-2.7 s of host CPU in 5 s under
// --cpus 0.5, on top of the jail's own 2.5 s. The supervisor now spends
// only what the jail leaves of its limit (it reads the jail's cgroup
// counter), so jail and supervisor together stay within the limit plus a
// burst. stockade's side is its whole process CPU (every thread: the Go
// runtime wakes others whenever the supervisor's thread blocks), so the
// margin covers the run's setup and that runtime cost, not the supervisor.
func TestAttackRefusedSyscallLoopCPU(t *testing.T) {
	needJail(t)
	const cpus, wall = 0.2, 4 * time.Second
	s := py(refusedLoop)
	s.Cgroup.CPUs = cpus
	s.Timeout = wall
	before := selfCPU(t)
	r := mustRun(t, s)
	supervisor := selfCPU(t) - before
	jailCPU := time.Duration(r.CPUMs * float64(time.Millisecond))
	budget := time.Duration(cpus * float64(wall))
	t.Logf("verdict %s; in %v: stockade %v, the jail %v (limit %v), %d refused calls",
		r.Verdict, wall, supervisor, jailCPU, budget, blockedCount(r))
	if r.Verdict != VerdictTimeout {
		t.Fatalf("%+v", r)
	}
	if n := blockedCount(r); n < 1000 {
		// Under emulation (the qemu TCG of make vmtest) Python may not
		// even reach the loop in time; the cost of starting dominates.
		t.Skipf("only %d refused calls in %v: this machine is too slow to judge the supervisor's share", n, wall)
	}
	if supervisor+jailCPU > budget*5/4 {
		t.Fatalf("stockade %v + jail %v of CPU in %v, more than the jail's limit of %v", supervisor, jailCPU, wall, budget)
	}
}

func blockedCount(r *Result) int {
	n := 0
	for _, b := range r.BlockedSyscalls {
		n += b.Count
	}
	return n
}
