package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
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

// limitAliases are older names of request limits.
var limitAliases = map[string]profiles.Field{"output_limit": profiles.FieldOutput}

// limitsLayer is the profile layer the limits make, each value decoded as a
// profile file's is. A key that names no limit is a 400; a value the
// profile refuses, a 422.
func limitsLayer(l api.Limits) (*profiles.Profile, error) {
	layer := &profiles.Profile{Name: "request"}
	var errs []string
	keyOf := map[profiles.Field]string{}
	for _, key := range slices.Sorted(maps.Keys(l)) {
		f, ok := limitAliases[key]
		if !ok {
			if f, ok = profiles.LimitField(key); !ok || !slices.Contains(profiles.TightenableFields(), f) {
				return nil, badRequest("limits.%s: unknown limit (a request may set %s)", key, limitNames())
			}
		}
		// A name and its alias are one limit: given both, one would
		// silently win, as a key given twice in a file may not.
		if other, dup := keyOf[f]; dup {
			return nil, badRequest("limits.%s: the same limit as limits.%s; give one", key, other)
		}
		keyOf[f] = key
		v, err := tomlValue(l[key])
		if err == nil {
			err = layer.SetValue(f, v, requestOrigin)
		} else {
			err = &profiles.Error{Origin: requestOrigin, Field: string(f), Msg: err.Error()}
		}
		if err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return nil, &api.Error{Status: 422, Msg: strings.Join(errs, "; ")}
	}
	return layer, nil
}

// tomlValue is a JSON value as the profile decoder takes a TOML one: a
// number an int64 when it is whole, else a float64.
func tomlValue(v any) (any, error) {
	switch x := v.(type) {
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n, nil
		}
		f, err := x.Float64()
		if err != nil {
			return nil, fmt.Errorf("%s is not a number a limit can take", x)
		}
		return f, nil
	case nil:
		return nil, errors.New("must be a value, not null")
	}
	return v, nil
}

func limitNames() string {
	var names []string
	for _, f := range profiles.TightenableFields() {
		names = append(names, strings.TrimPrefix(string(f), "limits."))
	}
	return strings.Join(names, ", ")
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
