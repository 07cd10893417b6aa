package gateway

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestAttackTenantFloodsRuns: a tenant's runs each wait in the cluster's
// queue and each make a result of up to max_result in its bounded
// results bucket; without a bound per tenant one tenant's flood took all
// of both from every other tenant. Past its max_runs a run answers 503
// with Retry-After before it reaches the cluster; another tenant's run
// goes on meanwhile, and the tenant's next run once one is answered.
func TestAttackTenantFloodsRuns(t *testing.T) {
	tg := startGateway(t, nil)
	gate := make(chan struct{})
	tg.backend.mu.Lock()
	tg.backend.runGate = gate
	tg.backend.mu.Unlock()
	c := tg.client(t, nil)
	const bobMax = 2 // testTenants
	var wg sync.WaitGroup
	defer wg.Wait()
	released := false
	release := func() {
		if !released {
			close(gate)
			released = true
		}
	}
	defer release()
	for range bobMax {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tg.do(t, c, "POST", "/v1/run", tokenBob, `{"code":"print(1)"}`, nil)
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for tg.backend.runsArrived.Load() < bobMax && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := tg.backend.runsArrived.Load(); n != bobMax {
		t.Fatalf("%d of bob's %d runs reached the backend", n, bobMax)
	}
	req, _ := http.NewRequest("POST", "https://"+tg.addr+"/v1/run", strings.NewReader(`{"code":"print(1)"}`))
	req.Header.Set("Authorization", "Bearer "+tokenBob)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "max_runs") {
		t.Fatalf("bob's run past max_runs %d: %d (Retry-After %q) %s, want 503 with Retry-After naming max_runs",
			bobMax, resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if n := tg.backend.runsArrived.Load(); n != bobMax {
		t.Errorf("the refused run reached the backend (%d runs there)", n)
	}
	// Alice is not bob: her run reaches the cluster.
	wg.Add(1)
	go func() {
		defer wg.Done()
		tg.do(t, c, "POST", "/v1/run", tokenAlice, `{"code":"print(2)"}`, nil)
	}()
	for tg.backend.runsArrived.Load() < bobMax+1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := tg.backend.runsArrived.Load(); n != bobMax+1 {
		t.Errorf("alice's run, while bob is at his max_runs: %d runs in the backend, want %d", n, bobMax+1)
	}
	release()
	wg.Wait()
	if code, body := tg.do(t, c, "POST", "/v1/run", tokenBob, `{"code":"print(1)"}`, nil); code != 200 {
		t.Errorf("bob's run once his were answered: %d %s", code, body)
	}
}

// max_runs below 1 would refuse every run of the tenant: the file is
// refused instead, with the default named.
func TestMaxRunsBelowOneRefused(t *testing.T) {
	for _, v := range []string{"0", "-3"} {
		_, err := parseTenants("t", []byte("[tenant.x]\ntokens = [\""+tokenAlice+"\"]\nmax_runs = "+v+"\n"))
		if err == nil || !strings.Contains(err.Error(), "max_runs") {
			t.Errorf("max_runs = %s: %v, want refused", v, err)
		}
	}
}
