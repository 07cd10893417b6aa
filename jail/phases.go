package jail

// Phase is when one step of a run began (Result.Phases).
type Phase struct {
	Name string `json:"name"`
	// StartUs is microseconds since stockade's process started
	// (on Linux, from /proc/self/stat: see processStart).
	StartUs int64 `json:"start_us"`
}

// MonotonicNow is CLOCK_MONOTONIC in nanoseconds, the clock of every
// Phase, for a caller timing its own steps around a run (PhaseAt).
func MonotonicNow() int64 { return monotonicNow() }

// PhaseAt is the Phase named name that began at mono (MonotonicNow).
func PhaseAt(name string, mono int64) Phase {
	return Phase{Name: name, StartUs: (mono - processStart()) / 1000}
}

// PhaseOrigin is the instant every Phase's StartUs counts from, on
// MonotonicNow's clock: this process's start, as the kernel records it.
func PhaseOrigin() int64 { return processStart() }
