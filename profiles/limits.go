package profiles

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// A server request's (and a gateway tenant's) "limits" object, {"memory":
// "256M", "timeout": "30s"}, is one more profile layer: LimitsLayer makes
// it, each value set by the field's own setter as a profile file's is, so
// the same bad value gets the same error from a request, a flag and a file.

// LimitKeyError is a key of a limits object that names no limit a request
// may set, or names one limit twice (by its name and an alias).
type LimitKeyError struct{ Msg string }

func (e *LimitKeyError) Error() string { return e.Msg }

// limitAliases are older names of request limits.
var limitAliases = map[string]Field{"output_limit": FieldOutput}

// LimitsLayer is the profile layer named name that limits make, each value
// recorded with origin o. A key that names no tightenable limit is a
// *LimitKeyError; values the fields refuse are *Errors, joined.
func LimitsLayer(name string, limits map[string]any, o Origin) (*Profile, error) {
	layer := &Profile{Name: name}
	var errs []error
	keyOf := map[Field]string{}
	for _, key := range slices.Sorted(maps.Keys(limits)) {
		f, ok := limitAliases[key]
		if !ok {
			if f, ok = LimitField(key); !ok || !slices.Contains(TightenableFields(), f) {
				return nil, &LimitKeyError{fmt.Sprintf("limits.%s: unknown limit (a request may set %s)", key, limitNames())}
			}
		}
		// A name and its alias are one limit: given both, one would
		// silently win, as a key given twice in a file may not.
		if other, dup := keyOf[f]; dup {
			return nil, &LimitKeyError{fmt.Sprintf("limits.%s: the same limit as limits.%s; give one", key, other)}
		}
		keyOf[f] = key
		v, err := tomlValue(limits[key])
		if err == nil {
			err = layer.SetValue(f, v, o)
		} else {
			err = &Error{Origin: o, Field: string(f), Msg: err.Error()}
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
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
	for _, f := range TightenableFields() {
		names = append(names, strings.TrimPrefix(string(f), "limits."))
	}
	return strings.Join(names, ", ")
}
