package server

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestAttackMCPBatchPastPerCaller: one POST /v1/mcp is one request of its
// caller, admitted once under --per-caller. A JSON-RPC batch (the SDK
// serves one to a client that names no protocol version, or 2025-03-26)
// carried several tools/call in that one request, each run at once: a
// caller held to --per-caller 1 ran as many runs as the batch had calls,
// filling every run slot and the queue another caller should have had.
func TestAttackMCPBatchPastPerCaller(t *testing.T) {
	s := startServer(t, "--pool", "0", "--per-caller", "1", "--concurrency", "4", "--audit-log", "")
	s.waitReady()
	var calls []map[string]any
	for i := range 3 {
		calls = append(calls, map[string]any{"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
			"params": map[string]any{"name": "run_python", "arguments": map[string]any{"code": "import time; time.sleep(60)", "timeout_seconds": 9}}})
	}
	b, _ := json.Marshal(calls)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	answered := make(chan string, 1)
	go func() {
		out, _ := exec.CommandContext(ctx, "curl", "-s", "-w", " %{http_code}", "--unix-socket", s.sock, "-H", "Content-Type: application/json",
			"-H", "Accept: application/json, text/event-stream", "--data-binary", string(b), "http://x/v1/mcp").Output()
		answered <- string(out)
	}()
	for {
		var h struct {
			Running int `json:"running"`
		}
		select {
		case out := <-answered:
			if !strings.HasSuffix(out, " 400") {
				t.Errorf("a batch of 3 tools/call: want 400, got %.300s", out)
			}
			return
		case <-ctx.Done():
			t.Fatal("the batch neither answered nor ran")
		case <-time.After(100 * time.Millisecond):
		}
		if s.get("/v1/health", &h) == 200 && h.Running > 1 {
			t.Fatalf("%d runs at once from one POST /v1/mcp of a caller under --per-caller 1", h.Running)
		}
	}
}
