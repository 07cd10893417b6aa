package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stockade/stockade/internal/proctest"
)

// TestMCPStdioInterruptAndProgress: over stdio, as a host runs it, a long
// cell's output comes as progress notifications while it runs (the client
// sent a progressToken), the interrupt tool stops it with its session's
// state kept, and a silent cell still gets a beat.
func TestMCPStdioInterruptAndProgress(t *testing.T) {
	sock := startServe(t)
	needSessions(t, sock)
	notes := make(chan *sdk.ProgressNotificationParams, 1000)
	cmd := exec.Command(mcpBin(t), "mcp", "--server", sock)
	stderr := &proctest.Buffer{}
	cmd.Stderr = stderr
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "stockade-test", Version: "1"}, &sdk.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) {
			select {
			case notes <- r.Params:
			default:
			}
		}}).Connect(ctx, &sdk.CommandTransport{Command: cmd, TerminateDuration: 30 * time.Second}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, stderr.String())
	}
	t.Cleanup(func() { cs.Close() })
	_, _, sc := mcpCall(t, cs, "create_session", nil)
	id, _ := sc["session_id"].(string)
	mcpCall(t, cs, "run_python", map[string]any{"session_id": id, "code": "x = 'kept'"})
	if res, text, _ := mcpCall(t, cs, "interrupt", map[string]any{"session_id": id}); !res.IsError || !strings.Contains(text, "nothing to interrupt") {
		t.Errorf("interrupt while idle: %s", text)
	}

	type answer struct {
		res *sdk.CallToolResult
		err error
	}
	done := make(chan answer, 1)
	var mu sync.Mutex
	finished := false
	go func() {
		p := &sdk.CallToolParams{Name: "run_python", Arguments: map[string]any{"session_id": id,
			"code": "import time\nfor i in range(600):\n    print('tick', i, flush=True)\n    time.sleep(0.1)"}}
		p.SetProgressToken("long-cell")
		res, err := cs.CallTool(ctx, p)
		mu.Lock()
		finished = true
		mu.Unlock()
		done <- answer{res, err}
	}()
	// The first line comes as a notification while the cell runs.
	var seen strings.Builder
	for !strings.Contains(seen.String(), "tick 0\n") {
		select {
		case n := <-notes:
			if n.ProgressToken != "long-cell" {
				t.Fatalf("a notification for %v", n.ProgressToken)
			}
			seen.WriteString(n.Message)
		case a := <-done:
			t.Fatalf("the call ended before any progress: %v %v (notifications: %q)", a.err, a.res, seen.String())
		case <-ctx.Done():
			t.Fatalf("no progress with the cell's output: %q\n%s", seen.String(), stderr.String())
		}
	}
	mu.Lock()
	early := !finished
	mu.Unlock()
	if !early {
		t.Errorf("the output came only once the call had ended")
	}
	if res, text, sc := mcpCall(t, cs, "interrupt", map[string]any{"session_id": id}); res.IsError || sc["status"] != "interrupting" {
		t.Errorf("interrupt: %s", text)
	}
	a := <-done
	if a.err != nil {
		t.Fatal(a.err)
	}
	var out map[string]any
	b, _ := json.Marshal(a.res.StructuredContent)
	json.Unmarshal(b, &out)
	if out["verdict"] != "interrupted" || out["state"] != "kept" || !strings.HasPrefix(out["stdout"].(string), "tick 0\n") {
		t.Errorf("the interrupted call: %v", out)
	}
	if _, _, sc := mcpCall(t, cs, "run_python", map[string]any{"session_id": id, "code": "x"}); sc["result"] != "'kept'" {
		t.Errorf("state after the interrupt: %v", sc)
	}

	// A single-use run streams too (POST /v1/run as NDJSON), and its
	// result is the one an unstreamed run gets.
	for len(notes) > 0 {
		<-notes
	}
	p1 := &sdk.CallToolParams{Name: "run_python", Arguments: map[string]any{"code": "import time\nprint('single', flush=True)\ntime.sleep(1)"}}
	p1.SetProgressToken("single")
	res, err := cs.CallTool(ctx, p1)
	var single map[string]any
	b, _ = json.Marshal(res.StructuredContent)
	json.Unmarshal(b, &single)
	if err != nil || res.IsError || single["verdict"] != "ok" || single["stdout"] != "single\n" || single["type"] != nil {
		t.Errorf("a single-use run with progress: %v %v", err, single)
	}
	if !awaitNote(ctx, notes, func(n *sdk.ProgressNotificationParams) bool { return strings.Contains(n.Message, "single\n") }) {
		t.Errorf("no progress with a single-use run's output")
	}

	// A silent cell is said to be running.
	for len(notes) > 0 {
		<-notes
	}
	p := &sdk.CallToolParams{Name: "run_python", Arguments: map[string]any{"session_id": id, "code": "import time\ntime.sleep(7)"}}
	p.SetProgressToken(7)
	if res, err := cs.CallTool(ctx, p); err != nil || res.IsError {
		t.Fatalf("the silent cell: %v %v", err, res)
	}
	if !awaitNote(ctx, notes, func(n *sdk.ProgressNotificationParams) bool {
		return strings.Contains(n.Message, "running for") && n.ProgressToken == float64(7)
	}) {
		t.Errorf("no beat during a silent 7 s cell")
	}
}

// awaitNote waits for a notification that matches: the client's handler
// is called apart from the call's answer, so on a loaded host a note sent
// before the answer can be handled after CallTool returned. It gives up
// after 30 s (or ctx), having seen none.
func awaitNote(ctx context.Context, notes <-chan *sdk.ProgressNotificationParams, match func(*sdk.ProgressNotificationParams) bool) bool {
	give := time.NewTimer(30 * time.Second)
	defer give.Stop()
	for {
		select {
		case n := <-notes:
			if match(n) {
				return true
			}
		case <-give.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}
