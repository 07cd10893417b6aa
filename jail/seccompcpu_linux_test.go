package jail

import (
	"encoding/json"
	"os/exec"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/proctest"
	"github.com/stockade/stockade/internal/testenv"
)

// A jail looping on refused calls makes stockade's supervisor work for
// it, outside the jail's cgroup: 2.2-2.7 s of host CPU in 5 s under
// --cpus 0.5, on top of the jail's own 2.5 s. The supervisor now spends
// only what the jail leaves of its limit (it reads the jail's cgroup
// counter), so jail and supervisor together stay within the limit plus a
// burst. The cost is measured from outside, as the host sees it: a
// stockade process runs the jail, and its rusage after wait4 counts every
// thread of stockade (the Go runtime wakes others whenever the
// supervisor's thread blocks) and every process of the jail it reaped.
// Measuring this test process instead counted other tests' leftovers.
func TestAttackRefusedSyscallLoopCPU(t *testing.T) {
	testenv.NeedJail(t)
	bin := testenv.NeedBinary(t, "the cost is measured on a stockade process")
	const cpus, wall = 0.2, 4 * time.Second
	cmd := exec.Command(bin, "run", "--json", "--cpus", "0.2", "--timeout", "4s", "--", "python3", "-c", proctest.RefusedLoop(2))
	o := proctest.Run(t, cmd, jailDeadline(wall))
	out := []byte(o.Stdout)
	var r Result
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("result %q: %v", out, err)
	}
	host := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	jailCPU := time.Duration(r.CPUMs * float64(time.Millisecond))
	budget := time.Duration(cpus * float64(wall))
	t.Logf("verdict %s; in %v: stockade and all it reaped %v, of it the jail %v (limit %v), %d refused calls",
		r.Verdict, wall, host, jailCPU, budget, blockedCount(&r))
	if r.Verdict != VerdictTimeout {
		t.Fatalf("%+v", r)
	}
	// A machine too slow to judge makes few calls; a filter that refuses
	// nothing lets them all through (a skip here hid a missing filter).
	made, notRefused := proctest.RefusedLoopMade(r.Stdout)
	if n := blockedCount(&r); notRefused || n < made/2 {
		t.Fatalf("the loop made %d calls (one not refused: %v), stockade reports %d refused: the filter did not refuse them", made, notRefused, n)
	}
	if n := blockedCount(&r); n < 1000 {
		// Under emulation (the qemu TCG of make vmtest) Python may not
		// even reach the loop in time; the cost of starting dominates.
		t.Skipf("only %d refused calls in %v: this machine is too slow to judge the supervisor's share", n, wall)
	}
	if host > budget*5/4 {
		t.Fatalf("stockade and its jail cost the host %v of CPU in %v, more than the jail's limit of %v", host, wall, budget)
	}
}

func blockedCount(r *Result) int {
	n := 0
	for _, b := range r.BlockedSyscalls {
		n += b.Count
	}
	return n
}
