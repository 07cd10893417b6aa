package server

import (
	"errors"
	"reflect"
	"strings"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/profiles"
)

// How a request becomes policy: its limits are one more profile layer over
// the server's profile, tightened only, validated as a flag's or a file's
// value is, and turned into the jail's spec by Profile.Spec like any other.

// requestOrigin is where a request's limits come from, in their errors:
// "request: limits.memory: ...".
var requestOrigin = profiles.Origin{File: "request"}

// limitsLayer is the profile layer the limits make, each value decoded as
// a profile file's is (profiles.LimitsLayer). A key that names no limit is
// a 400; a value the profile refuses, a 422.
func limitsLayer(l api.Limits) (*profiles.Profile, error) {
	layer, err := profiles.LimitsLayer("request", l, requestOrigin)
	var ke *profiles.LimitKeyError
	switch {
	case errors.As(err, &ke):
		return nil, badRequest("%s", ke.Msg)
	case err != nil:
		return nil, &api.Error{Status: 422, Msg: joinErrors(err)}
	}
	return layer, nil
}

// LimitsOf is the limits a profile layer sets (a client's flags, say), in
// the form a request carries them.
func LimitsOf(p *profiles.Profile) api.Limits {
	l := api.Limits{}
	for _, f := range profiles.TightenableFields() {
		if p.IsSet(f) {
			l[strings.TrimPrefix(string(f), "limits.")] = p.Value(f)
		}
	}
	return l
}

// serveLayer is what the server's jails need under every profile it
// offers, as a profile layer the offered one is merged over (so a profile
// that sets one of these variables itself keeps its own value).
// matplotlib draws without a display. Its font cache and config directory
// are the jail's own (package pydata: MPLCONFIGDIR on the jail's /tmp,
// the cache bound read-only), which a MPLCONFIGDIR set here would turn
// off. The XDG directories keep what other libraries cache (and
// matplotlib's, should a root's cache be missing) out of /work, where it
// would come back as the run's files.
func serveLayer() *profiles.Profile {
	l := &profiles.Profile{Name: "serve"}
	for _, kv := range []string{"MPLBACKEND=Agg", "XDG_CACHE_HOME=/tmp/.cache", "XDG_CONFIG_HOME=/tmp/.config"} {
		// Constant, well-formed: Set cannot refuse them.
		_ = l.Set(profiles.FieldEnvVars, kv, profiles.Origin{File: "stockade serve"})
	}
	return l
}

// joinErrors is err's lines (errors.Join's) on one line.
func joinErrors(err error) string {
	return strings.Join(strings.Split(err.Error(), "\n"), "; ")
}

// poolServes reports whether a jail prepared as pooled can serve a request
// that needs spec: every limit fixed at set-up must be the same, and only
// the timeout, which Start applies, may differ.
func poolServes(pooled, spec jail.Spec) bool {
	spec.Timeout = pooled.Timeout
	return reflect.DeepEqual(pooled, spec)
}
