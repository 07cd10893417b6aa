package server

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestServeMCPInterrupt: over POST /v1/mcp, one connection's interrupt
// tool stops the cell another connection's run_python runs, its state
// kept; a progressToken over these JSON answers costs nothing (they carry
// no notification) and the call still answers.
func TestServeMCPInterrupt(t *testing.T) {
	s := startServer(t, "--pool", "1", "--audit-log", "")
	needSessions(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	call := func(cs *sdk.ClientSession, p *sdk.CallToolParams) (*sdk.CallToolResult, map[string]any) {
		t.Helper()
		res, err := cs.CallTool(ctx, p)
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		b, _ := json.Marshal(res.StructuredContent)
		var sc map[string]any
		json.Unmarshal(b, &sc)
		return res, sc
	}
	first, second := mcpSession(t, s), mcpSession(t, s)
	_, sc := call(first, &sdk.CallToolParams{Name: "create_session", Arguments: map[string]any{}})
	id, _ := sc["session_id"].(string)
	call(first, &sdk.CallToolParams{Name: "run_python", Arguments: map[string]any{"session_id": id, "code": "x = 'kept'"}})
	done := make(chan map[string]any, 1)
	texts := make(chan string, 1)
	go func() {
		p := &sdk.CallToolParams{Name: "run_python", Arguments: map[string]any{"session_id": id, "code": "import time\nprint('started', flush=True)\ntime.sleep(60)"}}
		p.SetProgressToken("t")
		res, sc := call(first, p)
		texts <- mcpText(res)
		done <- sc
	}()
	eventually(t, "the cell runs", func() bool { _, in := s.info(id); return in.Busy })
	if res, sc := call(second, &sdk.CallToolParams{Name: "interrupt", Arguments: map[string]any{"session_id": id}}); res.IsError || sc["status"] != "interrupting" {
		t.Errorf("interrupt: %s", mcpText(res))
	}
	select {
	case sc := <-done:
		if sc["verdict"] != "interrupted" || sc["state"] != "kept" || sc["stdout"] != "started\n" {
			t.Errorf("the interrupted call: %v %s", sc, <-texts)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the interrupted call did not end")
	}
	if _, sc := call(second, &sdk.CallToolParams{Name: "run_python", Arguments: map[string]any{"session_id": id, "code": "x"}}); sc["result"] != "'kept'" {
		t.Errorf("state after: %v", sc)
	}
	if res, _ := call(second, &sdk.CallToolParams{Name: "interrupt", Arguments: map[string]any{"session_id": id}}); !res.IsError || !strings.Contains(mcpText(res), "nothing to interrupt") {
		t.Errorf("interrupt while idle: %s", mcpText(res))
	}
}
