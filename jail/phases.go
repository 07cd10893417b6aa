package jail

import "github.com/stockade/stockade/api"

// Phase is when one step of a run began (Result.Phases).
type Phase = api.Phase

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
