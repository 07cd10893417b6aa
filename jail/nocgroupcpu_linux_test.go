package jail

import (
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/testenv"
)

// TestAttackNoCgroupCPUTimeClaimedNotEnforced: a CPU-time limit is the
// whole tree's, polled from the run's cgroup. Without a cgroup
// (Host.NoCgroup) only the per-process RLIMIT_CPU backstop is left, a
// whole second or more above the limit and per process, yet the result
// said limits.cpu_time_ms as if the limit held: a payload used twice its
// "1000 ms" of CPU and ended ok. The result must not claim a limit the
// run was not held to, and must say what held instead.
func TestAttackNoCgroupCPUTimeClaimedNotEnforced(t *testing.T) {
	testenv.NeedJail(t)
	s := py("import time\nwhile time.process_time() < 2.2: pass\nprint('spun')")
	s.Host.NoCgroup = true
	s.Cgroup.CPUTime = time.Second
	s.Timeout = 60 * time.Second
	r := mustRun(t, s)
	used := r.UserMs + r.SysMs
	if r.Verdict == VerdictOK && r.Limits.CPUTimeMs != nil && used > float64(*r.Limits.CPUTimeMs) {
		t.Errorf("verdict ok after %.0f ms of CPU, but limits.cpu_time_ms says %d", used, *r.Limits.CPUTimeMs)
	}
	if !strings.Contains(strings.Join(r.Degraded, "\n"), "RLIMIT_CPU") {
		t.Errorf("degraded %q does not say which CPU limit held", r.Degraded)
	}
}
