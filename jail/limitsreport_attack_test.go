package jail

import (
	"testing"
	"time"
)

// TestAttackSubMillisecondLimitReportsZero: a request (or a profile) may
// set timeout = "1us" or cpu_time = "1ns" (both pass Validate and Tighten,
// and both are enforced), but Result.Limits truncated them to
// milliseconds: "timeout_ms": 0 and "cpu_time_ms": 0, which read as no
// limit, or a limit of nothing, rather than the limit the jail was held to.
// A reported limit must never be below the enforced one.
func TestAttackSubMillisecondLimitReportsZero(t *testing.T) {
	for _, d := range []time.Duration{time.Nanosecond, 500 * time.Microsecond, 1500 * time.Microsecond} {
		s := Spec{Timeout: d, Cgroup: CgroupSpec{CPUTime: d}}
		l := LimitsOf(s)
		if time.Duration(l.TimeoutMs)*time.Millisecond < d {
			t.Errorf("timeout %v reported as timeout_ms %d", d, l.TimeoutMs)
		}
		if l.CPUTimeMs == nil || time.Duration(*l.CPUTimeMs)*time.Millisecond < d {
			t.Errorf("cpu time %v reported as cpu_time_ms %d", d, derefInt64(l.CPUTimeMs))
		}
	}
}

func derefInt64(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}
