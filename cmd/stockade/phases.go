package main

import (
	"fmt"
	"io"

	"github.com/stockade/stockade/jail"
)

// When main began and when it began parsing the command line, on
// jail.MonotonicNow's clock: set once by main before anything else runs,
// read only by `run --phases` (0 when a test calls realMain).
var startedMain, parsing int64

// mainPhases are the command line's steps before the run: main, and the
// flags and the profile read.
func mainPhases() []jail.Phase {
	if startedMain == 0 {
		return nil
	}
	return []jail.Phase{
		jail.PhaseAt("main: close inherited descriptors", startedMain),
		jail.PhaseAt("main: read flags and profile", parsing),
	}
}

// printPhases writes the phase table of `run --phases` to w: when each
// step began, in microseconds since stockade's process started, and how
// long until the next one began.
func printPhases(w io.Writer, phases []jail.Phase, end int64) {
	phases = append(phases, jail.PhaseAt("main: exit", end))
	// The origin lets a caller that read the same clock before it started
	// stockade (scripts/phases) tell the process's start exactly.
	fmt.Fprintf(w, "stockade: phases (µs since stockade's process started at CLOCK_MONOTONIC %d ns, known to 10 ms; the steps' lengths are exact)\n", jail.PhaseOrigin())
	fmt.Fprintf(w, "%10s %9s  %s\n", "start_us", "took_us", "step")
	fmt.Fprintf(w, "%10d %9d  %s\n", 0, firstStart(phases), "process start: exec, Go runtime, package init")
	for i, p := range phases {
		took := ""
		if i+1 < len(phases) {
			took = fmt.Sprint(phases[i+1].StartUs - p.StartUs)
		}
		fmt.Fprintf(w, "%10d %9s  %s\n", p.StartUs, took, p.Name)
	}
}

func firstStart(phases []jail.Phase) int64 {
	if len(phases) == 0 {
		return 0
	}
	return phases[0].StartUs
}
