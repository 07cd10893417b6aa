package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

type nopCloser struct{ io.Reader }

func (nopCloser) Close() error { return nil }

type recordingWriter struct {
	header http.Header
	code   int
}

func (r *recordingWriter) Header() http.Header         { return r.header }
func (r *recordingWriter) Write(b []byte) (int, error) { return len(b), nil }
func (r *recordingWriter) WriteHeader(code int)        { r.code = code }

func mustRequest(t *testing.T, method, url, token string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return req
}

// A tenant's policy: a profile it may not use is 403, a limit above its
// cap 422, a limit it leaves out gets the cap, a tighter one stays, the
// rest of the body goes on as it came.
func TestTenantPolicy(t *testing.T) {
	tg := startGateway(t, nil)
	c := tg.client(t, nil)
	for _, tc := range []struct {
		name, body string
		code       int
		profile    string
		limits     map[string]any
	}{
		{"default profile and caps", `{"code":"print('<b>')"}`, 200, "python", map[string]any{"memory": "256M", "timeout": "10s"}},
		{"tighter kept", `{"code":"1","profile":"data","limits":{"memory":"64M","pids":8}}`, 200, "data", map[string]any{"memory": "64M", "timeout": "10s", "pids": float64(8)}},
		{"other profile", `{"code":"1","profile":"net"}`, 403, "", nil},
		{"looser memory", `{"code":"1","limits":{"memory":"1G"}}`, 422, "", nil},
		{"looser timeout", `{"code":"1","limits":{"timeout":"1m"}}`, 422, "", nil},
		{"unknown limit", `{"code":"1","limits":{"root":"/"}}`, 400, "", nil},
		{"not json", `code=1`, 400, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tg.backend.callCount()
			code, body := tg.do(t, c, "POST", "/v1/run", tokenBob, tc.body, nil)
			if code != tc.code {
				t.Fatalf("%d %s, want %d", code, body, tc.code)
			}
			if code != 200 {
				if tg.backend.callCount() != before {
					t.Fatal("a refused request reached the backend")
				}
				return
			}
			var got struct {
				Code    string         `json:"code"`
				Profile string         `json:"profile"`
				Limits  map[string]any `json:"limits"`
			}
			if err := json.Unmarshal(tg.backend.last().body, &got); err != nil {
				t.Fatal(err)
			}
			if got.Profile != tc.profile {
				t.Errorf("profile %q, want %q", got.Profile, tc.profile)
			}
			for k, v := range tc.limits {
				if got.Limits[k] != v {
					t.Errorf("limits.%s = %v, want %v (all: %v)", k, got.Limits[k], v, got.Limits)
				}
			}
			if got.Code == "" {
				t.Error("the code did not go on")
			}
		})
	}
	// Alice has no policy: her body goes on byte for byte.
	body := `{"code":"1", "limits":{"memory":"64G"}}`
	if code, _ := tg.do(t, c, "POST", "/v1/run", tokenAlice, body, nil); code != 200 || string(tg.backend.last().body) != body {
		t.Fatalf("alice's body was changed: %q", tg.backend.last().body)
	}
}

// POST /v1/mcp is the gateway's: a tool's request goes through the same
// policy and the same backend as the tenant's own, as the tenant.
func TestMCPThroughPolicy(t *testing.T) {
	tg := startGateway(t, nil)
	c := tg.client(t, nil)
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_python","arguments":{"code":"print(6*7)"}}}`
	hdr := map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
	code, body := tg.do(t, c, "POST", "/v1/mcp", tokenBob, call, hdr)
	if code != 200 || !strings.Contains(body, `"result"`) {
		t.Fatalf("bob's run_python over MCP: %d %s", code, body)
	}
	got := tg.backend.last()
	if got.path != "/v1/run" || got.tenant != "bob" {
		t.Fatalf("the tool's request reached the backend as %s %s for %q", got.method, got.path, got.tenant)
	}
	var run struct {
		Profile string         `json:"profile"`
		Limits  map[string]any `json:"limits"`
	}
	if err := json.Unmarshal(got.body, &run); err != nil {
		t.Fatal(err)
	}
	if run.Profile != "python" || run.Limits["memory"] != "256M" || run.Limits["timeout"] != "10s" {
		t.Fatalf("the tool's run went on with profile %q, limits %v: bob's policy was not applied", run.Profile, run.Limits)
	}
	// Without a token there is no MCP either.
	if code, _ := tg.do(t, c, "POST", "/v1/mcp", "", call, hdr); code != 401 {
		t.Fatalf("/v1/mcp without a token: %d", code)
	}
}

// One audit line per request, naming the tenant and never the token.
func TestAuditNamesTenant(t *testing.T) {
	tg := startGateway(t, nil)
	c := tg.client(t, nil)
	tg.do(t, c, "POST", "/v1/run", tokenAlice, `{"code":"1"}`, nil)
	tg.do(t, c, "GET", "/v1/sessions", tokenBob, "", nil)
	tg.do(t, c, "GET", "/v1/sessions", tokenAlice+"x", "", nil)
	tg.do(t, c, "GET", "/v1/sessions/s1/files/secret/data.csv", tokenAlice, "", nil)
	// The gateway's Serve has returned from each handler before the
	// answer is read; the lines are there.
	log := tg.audit.String()
	lines := strings.Split(strings.TrimSpace(log), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d audit lines for 4 requests:\n%s", len(lines), log)
	}
	want := []struct {
		tenant, route string
		status        float64
	}{
		{"alice", "/v1/run", 200}, {"bob", "/v1/sessions", 200}, {"", "/v1/sessions", 401}, {"alice", "/v1/sessions/s1/files/...", 404},
	}
	for i, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("line %d %q: %v", i, l, err)
		}
		if rec["tenant"] != want[i].tenant || rec["route"] != want[i].route || rec["status"] != want[i].status {
			t.Errorf("line %d: %v, want tenant %q route %q status %v", i, rec, want[i].tenant, want[i].route, want[i].status)
		}
	}
	for _, secret := range []string{tokenAlice, tokenBob, "secret", "data.csv"} {
		if strings.Contains(log, secret) {
			t.Errorf("the audit log holds %q", secret)
		}
	}
}

// /v1/health answers anyone (a load balancer's check); /v1/metrics only
// a tenant allowed to, with the gateway's counters and the backend's.
func TestHealthAndMetrics(t *testing.T) {
	tg := startGateway(t, nil)
	c := tg.client(t, nil)
	if code, body := tg.do(t, c, "GET", "/v1/health", "", "", nil); code != 200 || !strings.Contains(body, `"ok":true`) {
		t.Fatalf("health: %d %s", code, body)
	}
	if code, _ := tg.do(t, c, "GET", "/v1/metrics", "", "", nil); code != 401 {
		t.Fatalf("metrics without a token: %d", code)
	}
	if code, _ := tg.do(t, c, "GET", "/v1/metrics", tokenAlice, "", nil); code != 403 {
		t.Fatalf("metrics for alice: %d, want 403", code)
	}
	tg.do(t, c, "POST", "/v1/run", tokenAlice, `{"code":"1"}`, nil)
	code, body := tg.do(t, c, "GET", "/v1/metrics", tokenOps, "", nil)
	if code != 200 {
		t.Fatalf("metrics for ops: %d %s", code, body)
	}
	for _, want := range []string{"stockade_gateway_unauthorized_total 1\n", "stockade_gateway_forwarded_total 1\n", "stockade_gateway_tenants 3\n", "stockade_cluster_fake 1\n"} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
}

// An operator's SIGHUP reloads the tenants file: a token added works, a
// token removed stops working, without a restart.
func TestSIGHUPReloadsTenants(t *testing.T) {
	tg := startGateway(t, nil)
	c := tg.client(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reloaded := make(chan error, 4)
	tg.g.ReloadOnSIGHUP(ctx, func(err error) { reloaded <- err })
	carol := strings.Repeat("d4", 20)
	next := strings.Replace(testTenants, `tokens = ["`+tokenAlice+`"]`, `tokens = ["`+carol+`"]`, 1)
	if err := os.WriteFile(tg.g.cfg.TenantsFile, []byte(next), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-reloaded:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no reload within 30 s of SIGHUP")
	}
	if code, _ := tg.do(t, c, "GET", "/v1/sessions", carol, "", nil); code != 200 {
		t.Fatalf("the added token: %d", code)
	}
	if code, _ := tg.do(t, c, "GET", "/v1/sessions", tokenAlice, "", nil); code != 401 {
		t.Fatalf("the removed token: %d, want 401", code)
	}
}

// A tenant holding its max_sessions gets 429 for one more; the backend
// is asked for no session past the quota.
func TestSessionQuota(t *testing.T) {
	tg := startGateway(t, nil)
	c := tg.client(t, nil)
	for i := 0; i < 2; i++ {
		if code, body := tg.do(t, c, "POST", "/v1/sessions", tokenBob, `{}`, nil); code != 201 {
			t.Fatalf("bob's session %d: %d %s", i, code, body)
		}
	}
	if code, body := tg.do(t, c, "POST", "/v1/sessions", tokenBob, `{}`, nil); code != 429 {
		t.Fatalf("bob's third session (max_sessions 2): %d %s, want 429", code, body)
	}
	if n := len(tg.backend.sessions); n != 2 {
		t.Fatalf("the backend holds %d sessions, want 2", n)
	}
	// Alice has no quota.
	for i := 0; i < 3; i++ {
		if code, _ := tg.do(t, c, "POST", "/v1/sessions", tokenAlice, `{}`, nil); code != 201 {
			t.Fatalf("alice's session %d: %d", i, code)
		}
	}
}

// The tenants file docs/gateway.md shows is one the gateway takes, and
// says what the page says of it.
func TestDocsTenantsFileLoads(t *testing.T) {
	doc, err := os.ReadFile("../docs/gateway.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```toml\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("no ```toml block in docs/gateway.md")
	}
	ts, err := parseTenants("docs/gateway.md", []byte(block))
	if err != nil {
		t.Fatal(err)
	}
	bob := ts.ByCertName("bob.clients.example.com")
	if ts.Len() != 3 || bob == nil || bob.MaxSessions != 4 || bob.MaxRuns != 8 || ts.ByToken("0d5e4c3b2a1908f7e6d5c4b3a291807f6e5d4c3b2a190817f6e5d4c3b2a1908f").MaxRuns != DefaultMaxRuns || !slices.Equal(bob.Profiles, []string{"python", "data"}) {
		t.Fatalf("the example's tenants: %d, bob %+v", ts.Len(), bob)
	}
	got, err := tightenLimits(bob, map[string]any{"memory": "128M"})
	if err != nil || got["memory"] != "128M" || got["timeout"] != "1m0s" || got["cpus"] != float64(1) {
		t.Fatalf("bob's limits for a request of 128M: %v, %v", got, err)
	}
	if _, err := tightenLimits(bob, map[string]any{"memory": "1G"}); err == nil || !strings.Contains(err.Error(), "above the ceiling") {
		t.Fatalf("1G against bob's 512M: %v", err)
	}
}

// TestAttackMCPBatch: a JSON-RPC batch (which the SDK serves to a client of
// protocol 2025-03-26) would run all its calls at once under one request,
// past the tenant's session quota, every answer held. It is refused whole,
// and none of its calls reaches the backend.
func TestAttackMCPBatch(t *testing.T) {
	tg := startGateway(t, nil)
	c := tg.client(t, nil)
	call := `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"create_session","arguments":{}}}`
	batch := " \n[" + fmt.Sprintf(call, 1) + "," + fmt.Sprintf(call, 2) + "," + fmt.Sprintf(call, 3) + "]"
	hdr := map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
		"MCP-Protocol-Version": "2025-03-26"}
	code, body := tg.do(t, c, "POST", "/v1/mcp", tokenBob, batch, hdr)
	tg.backend.mu.Lock()
	calls := len(tg.backend.calls)
	tg.backend.mu.Unlock()
	if code != 400 || calls != 0 {
		t.Fatalf("a batch of three create_session calls: %d %s, and %d requests reached the backend", code, body, calls)
	}
}
