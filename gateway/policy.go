package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/stockade/stockade/profiles"
)

// A tenant's policy meets a request the way the server's profile does: its
// caps are one profile layer, the request's limits another laid over it by
// profiles.Tighten (nothing looser than the cap), each value set and
// refused by profiles' own setters with profiles' own messages. The
// result goes on as the request's limits, so the node tightens them once
// more against its own profile.

// tenantOrigin and requestOrigin name a limit's layer in its errors.
var (
	tenantOrigin  = profiles.Origin{File: "tenant"}
	requestOrigin = profiles.Origin{File: "request"}
)

// capsLayer is the tenant's caps as a profile layer.
func capsLayer(t *Tenant) (*profiles.Profile, error) {
	return profiles.LimitsLayer("tenant "+t.Name, t.Limits, tenantOrigin)
}

// tightenLimits lays a request's limits over the tenant's caps, tighten
// only, and returns the limits the request goes on with: the request's
// own where it set one (no looser than the cap), the cap where it did not.
func tightenLimits(t *Tenant, req map[string]any) (map[string]any, error) {
	caps, err := capsLayer(t)
	if err != nil {
		return nil, err
	}
	over, err := profiles.LimitsLayer("request", req, requestOrigin)
	if err != nil {
		return nil, err
	}
	// The ceiling is the caps over the request itself: a limit the
	// tenant has no cap for is its own ceiling (as tight as itself), so
	// Tighten judges only what the tenant caps.
	ceiling := profiles.Merge(over, caps)
	ceiling.Name = "tenant " + t.Name
	merged, err := profiles.Tighten(ceiling, over)
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	for _, f := range profiles.TightenableFields() {
		if merged.IsSet(f) {
			out[strings.TrimPrefix(string(f), "limits.")] = merged.Value(f)
		}
	}
	return out, nil
}

// policyError is a request the tenant's policy refuses: 403 for a
// profile it may not use, 422 for a limit above its cap, 400 for a body
// that is not the route's JSON.
type policyError struct {
	status int
	msg    string
}

func (e *policyError) Error() string { return e.msg }

// applyPolicy checks the body of a request that starts work (POST /v1/run,
// POST /v1/sessions) against the tenant: the profile named must be one it
// may use (none named: its first), and the limits are tightened by its
// caps. It returns the body to forward: the caller's, with "profile" and
// "limits" rewritten and every other field as it came.
func applyPolicy(t *Tenant, body []byte) ([]byte, error) {
	if len(t.Profiles) == 0 && len(t.Limits) == 0 {
		return body, nil
	}
	var doc map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil || doc == nil {
		return nil, &policyError{400, "the body is not a JSON object"}
	}
	// A node matches a key to a field as encoding/json does, by Unicode
	// case folding ("limitſ" is "limits"), the last one winning: a key
	// the policy governs is taken only as spelled, or the node would
	// read limits the policy never saw.
	for k := range doc {
		for _, f := range []string{"profile", "limits"} {
			if k != f && strings.EqualFold(k, f) {
				return nil, &policyError{400, fmt.Sprintf("field %q: write it %q", k, f)}
			}
		}
	}
	if len(t.Profiles) > 0 {
		var name string
		if raw, ok := doc["profile"]; ok {
			if err := json.Unmarshal(raw, &name); err != nil {
				return nil, &policyError{400, "profile: not a string"}
			}
		}
		switch {
		case name == "":
			name = t.Profiles[0]
		case !slices.Contains(t.Profiles, name):
			return nil, &policyError{403, fmt.Sprintf("profile %q: tenant %s may use %s", name, t.Name, strings.Join(t.Profiles, ", "))}
		}
		doc["profile"], _ = json.Marshal(name)
	}
	if len(t.Limits) > 0 {
		var limits map[string]any
		if raw, ok := doc["limits"]; ok && !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
			d := json.NewDecoder(bytes.NewReader(raw))
			d.UseNumber()
			if err := d.Decode(&limits); err != nil {
				return nil, &policyError{400, "limits: not a JSON object"}
			}
		}
		tight, err := tightenLimits(t, limits)
		var ke *profiles.LimitKeyError
		switch {
		case errors.As(err, &ke):
			return nil, &policyError{400, ke.Msg}
		case err != nil:
			return nil, &policyError{422, oneLine(err)}
		}
		doc["limits"], _ = json.Marshal(tight)
	}
	// Encoded as the server encodes (no HTML escaping: code holds "<").
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return nil, &policyError{400, "the body is not a JSON object"}
	}
	return out.Bytes(), nil
}

func oneLine(err error) string {
	return strings.Join(strings.Split(err.Error(), "\n"), "; ")
}
