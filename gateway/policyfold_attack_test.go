package gateway

import (
	"encoding/json"
	"testing"
)

// TestAttackPolicyFoldedKey: a node decodes a body as encoding/json
// does, matching a key to a field by Unicode case folding, where "ſ"
// (U+017F) is "s"; the tenant's policy must read the same keys. A body
// whose limits are under "limitſ" slipped past a policy that looked only
// at "limits", and, re-encoded with the keys sorted, came after the caps
// the policy wrote: the node took the tenant's own limits, over its caps.
func TestAttackPolicyFoldedKey(t *testing.T) {
	tg := startGateway(t, nil)
	c := tg.client(t, nil)
	for _, tc := range []struct{ path, body string }{
		{"/v1/run", `{"code":"1","limit` + "\u017f" + `":{"memory":"100G","timeout":"1h"}}`},
		{"/v1/sessions", `{"limit` + "\u017f" + `":{"memory":"100G","timeout":"1h"}}`},
		{"/v1/run", `{"code":"1","Profile":"net"}`},
		{"/v1/run", `{"code":"1","LIMITS":{"memory":"100G"}}`},
	} {
		before := tg.backend.callCount()
		code, answer := tg.do(t, c, "POST", tc.path, tokenBob, tc.body, nil)
		if tg.backend.callCount() == before {
			if code < 400 || code >= 500 {
				t.Errorf("%s %s: %d %s, not forwarded and not refused", tc.path, tc.body, code, answer)
			}
			continue
		}
		// What went on, decoded as the node decodes it.
		var got struct {
			Profile string         `json:"profile"`
			Limits  map[string]any `json:"limits"`
		}
		body := tg.backend.last().body
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatalf("%s: forwarded %s: %v", tc.path, body, err)
		}
		if got.Profile != "python" && got.Profile != "data" || got.Limits["memory"] != "256M" || got.Limits["timeout"] != "10s" {
			t.Errorf("%s %s: the node is given profile %q, limits %v (bob's caps: memory 256M, timeout 10s): %s",
				tc.path, tc.body, got.Profile, got.Limits, body)
		}
	}
}
