package jailinit

import "golang.org/x/sys/unix"

// MonoNow is CLOCK_MONOTONIC in nanoseconds: a vDSO read, no system call
// where the clock source allows (and one seccomp allows where not).
func MonoNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// trace is init's timing of its own steps for the parent (Config.Phases).
// A nil trace records nothing, so a run that did not ask pays nothing.
type trace struct{ marks []Mark }

// newTrace is a trace begun at begun, or nil when the parent did not ask.
func newTrace(on bool, begun int64) *trace {
	if !on {
		return nil
	}
	return &trace{marks: []Mark{{"init: main", begun}}}
}

func (t *trace) mark(name string) {
	if t != nil {
		t.marks = append(t.marks, Mark{"init: " + name, MonoNow()})
	}
}

// take hands over what was recorded since the last take.
func (t *trace) take() []Mark {
	if t == nil {
		return nil
	}
	m := t.marks
	t.marks = nil
	return m
}
