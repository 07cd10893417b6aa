package server

import (
	"testing"
	"time"

	"github.com/stockade/stockade/jail"
)

// TestAttackSubMillisecondLimitInAudit: a request may ask for a timeout or
// CPU time below a millisecond, and the jail enforces it; the audit log
// and a session's limits must not then say 0, which reads as no limit or
// a limit of nothing. They round up, as Result.Limits does.
func TestAttackSubMillisecondLimitInAudit(t *testing.T) {
	var s jail.Spec
	s.Timeout = 500 * time.Microsecond
	s.Cgroup.CPUTime = 1500 * time.Microsecond
	if a := limitsOf(s); a.TimeoutMs != 1 || a.CPUTimeMs != 2 {
		t.Errorf("audit limits: timeout %d ms, cpu time %d ms; want 1 and 2", a.TimeoutMs, a.CPUTimeMs)
	}
	l := sessionLimitsOf(s, time.Microsecond, 2*time.Second)
	if l.TimeoutMs != 1 || l.CPUTimeMs != 2 || l.IdleTimeoutMs != 1 || l.TTLMs != 2000 {
		t.Errorf("session limits: %+v", l)
	}
}
