package gateway

import (
	"sync"
	"testing"
	"time"
)

// TestAttackTenantHoldsGatewayRequests: every request a tenant has in a
// gateway holds its body (up to --max-body) and a goroutine for as long
// as the backend takes; with no bound per tenant, one token opened as
// many as it liked (thousands of 16 MB bodies: the gateway's memory,
// every tenant's gateway). Past --per-tenant a request answers 429
// before its body is read; another tenant is served meanwhile.
func TestAttackTenantHoldsGatewayRequests(t *testing.T) {
	const per = 4
	tg := startGateway(t, func(c *Config) { c.PerTenant = per })
	tg.backend.mu.Lock()
	tg.backend.createDelay = 2 * time.Second
	tg.backend.mu.Unlock()
	c := tg.client(t, nil)
	var wg sync.WaitGroup
	for range per {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tg.do(t, c, "POST", "/v1/sessions", tokenAlice, `{}`, nil)
		}()
	}
	defer wg.Wait()
	// The four are in the backend (their bodies read) before the fifth.
	deadline := time.Now().Add(10 * time.Second)
	for tg.backend.calls0() < per && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := tg.backend.calls0(); n < per {
		t.Fatalf("only %d of alice's %d requests reached the backend", n, per)
	}
	if code, body := tg.do(t, c, "POST", "/v1/sessions", tokenAlice, `{}`, nil); code != 429 {
		t.Fatalf("alice's request past --per-tenant %d: %d %s, want 429", per, code, body)
	}
	if code, body := tg.do(t, c, "GET", "/v1/sessions", tokenBob, "", nil); code != 200 {
		t.Fatalf("bob, while alice is at her bound: %d %s", code, body)
	}
}
