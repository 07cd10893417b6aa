package jail

import "testing"

func TestVerdictPrecedence(t *testing.T) {
	all := ending{Cancelled: true, OOMKilled: true, PidsLimitHit: true, DiskFull: true, CPUOver: true, TimedOut: true,
		SeccompKilled: true, Signaled: true, OutputCut: true, ExitStatus: 1}
	// Take the facts away one by one, most important first: each time the
	// next verdict in the documented order must win.
	order := []Verdict{VerdictCancelled, VerdictMemory, VerdictPids, VerdictDisk, VerdictCPU, VerdictTimeout,
		VerdictSeccomp, VerdictSignal, VerdictOutput, VerdictExit, VerdictOK}
	clear := []func(*ending){
		func(e *ending) { e.Cancelled = false }, func(e *ending) { e.OOMKilled = false },
		func(e *ending) { e.PidsLimitHit = false }, func(e *ending) { e.DiskFull = false },
		func(e *ending) { e.CPUOver = false },
		func(e *ending) { e.TimedOut = false }, func(e *ending) { e.SeccompKilled = false },
		func(e *ending) { e.Signaled = false }, func(e *ending) { e.OutputCut = false },
		func(e *ending) { e.ExitStatus = 0 },
	}
	e := all
	for i, want := range order {
		if got := e.verdict(); got != want {
			t.Errorf("step %d: %+v: verdict %s, want %s", i, e, got, want)
		}
		if i < len(clear) {
			clear[i](&e)
		}
	}
	// The cases users meet.
	for _, c := range []struct {
		e    ending
		want Verdict
	}{
		{ending{PidsLimitHit: true}, VerdictPids}, // a fork bomb whose payload still exited 0
		{ending{DiskFull: true, TimedOut: true}, VerdictDisk},
		{ending{OOMKilled: true, Signaled: true}, VerdictMemory},
		{ending{TimedOut: true, OutputCut: true}, VerdictTimeout},
		{ending{OutputCut: true, ExitStatus: 3}, VerdictOutput},
		{ending{ExitStatus: 3}, VerdictExit},
	} {
		if got := c.e.verdict(); got != c.want {
			t.Errorf("%+v: %s, want %s", c.e, got, c.want)
		}
	}
}
