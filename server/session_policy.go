package server

import "github.com/stockade/stockade/profiles"

// SessionDefaults is the layer laid over every offered profile for
// sessions before serve's own (Config.SessionLayer): an exec's timeout an
// agent can live with, E2B's 300 s, where a single-use run keeps the
// profile's (10 s for python). It is the one home of that default: serve's
// --session-timeout shows it and lays its own value over it.
func SessionDefaults() *profiles.Profile {
	l := &profiles.Profile{Name: "session defaults"}
	// Constant and well-formed: Set cannot refuse it.
	_ = l.Set(profiles.FieldTimeout, "5m", profiles.Origin{File: "session defaults"})
	return l
}

// SessionFields are the profile fields serve takes a --session-FLAG for:
// each exec's limits, which the server applies itself. The jail's own
// (memory, CPUs, pids, /work) stay the profile's, so sessions come from
// the same pool as single runs.
func SessionFields() []profiles.Field {
	return []profiles.Field{profiles.FieldTimeout, profiles.FieldCPUTime, profiles.FieldOutput}
}
