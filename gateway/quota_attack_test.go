package gateway

import (
	"sync"
	"testing"
	"time"
)

// TestAttackSessionQuotaBurst: a tenant sends many session requests at
// once to one gateway. Each counted the tenant's sessions before any of
// them existed (a session takes a jail's start to make), so every one
// was under the quota, and bob (max_sessions 2) held eight.
func TestAttackSessionQuotaBurst(t *testing.T) {
	tg := startGateway(t, nil)
	tg.backend.mu.Lock()
	tg.backend.createDelay = 200 * time.Millisecond
	tg.backend.mu.Unlock()
	c := tg.client(t, nil)
	const burst = 8
	codes := make(chan int, burst)
	var wg sync.WaitGroup
	for range burst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, _ := tg.do(t, c, "POST", "/v1/sessions", tokenBob, `{}`, nil)
			codes <- code
		}()
	}
	wg.Wait()
	close(codes)
	made, refused := 0, 0
	for code := range codes {
		switch code {
		case 201:
			made++
		case 429:
			refused++
		}
	}
	tg.backend.mu.Lock()
	held := 0
	for _, owner := range tg.backend.sessions {
		if owner == "bob" {
			held++
		}
	}
	tg.backend.mu.Unlock()
	if held > 2 || made > 2 {
		t.Fatalf("bob (max_sessions 2) sent %d at once: %d made, %d refused, the backend holds %d of his", burst, made, refused, held)
	}
	if made == 0 {
		t.Fatalf("none of bob's %d sessions was made (%d refused)", burst, refused)
	}
}
