package server

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpSession connects the Go SDK's client to POST /v1/mcp on the server's
// unix socket.
func mcpSession(t *testing.T, s *testServer) *sdk.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "stockade-test", Version: "1"}, nil).Connect(ctx,
		&sdk.StreamableClientTransport{Endpoint: "http://stockade/v1/mcp", HTTPClient: s.hc, DisableStandaloneSSE: true, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("connect to /v1/mcp: %v\n%s", err, s.logString())
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func mcpText(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestServeMCPStreamableHTTP(t *testing.T) {
	s := startServer(t, "--pool", "1", "--audit-log", "-")
	s.waitReady()
	cs := mcpSession(t, s)
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil || len(tools.Tools) != 6 {
		t.Fatalf("tools/list: %v %v", tools, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "run_python", Arguments: map[string]any{"code": "print(6*7)"}})
	if err != nil || res.IsError || !strings.Contains(mcpText(res), "42") {
		t.Fatalf("run_python: %v %v\n%s", err, res, s.logString())
	}
	sc, _ := json.Marshal(res.StructuredContent)
	if !strings.Contains(string(sc), `"hit":true`) {
		t.Errorf("the run did not come from the pool: %s", sc)
	}
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "run_python", Arguments: map[string]any{"code": "print(1)", "limits": map[string]any{"memory": "64G"}}})
	if err != nil || !res.IsError || !strings.Contains(mcpText(res), "additional properties") {
		t.Errorf("run_python with limits: not refused: %v %s", err, mcpText(res))
	}
	// Stateless: a second client, with no MCP session in common, is
	// served the same.
	cs2 := mcpSession(t, s)
	if res, err := cs2.CallTool(ctx, &sdk.CallToolParams{Name: "run_python", Arguments: map[string]any{"code": "print(7)"}}); err != nil || !strings.Contains(mcpText(res), "7") {
		t.Errorf("second client: %v %v", res, err)
	}
}

// TestAttackMCPRouteRunsAsServer: the MCP route calls the server's own
// routes in process. Were those calls made as the server (whose uid is
// always admitted) rather than as the caller, a uid the server refuses
// would run code through /v1/mcp, and every run would be audited as root.
// Here uid 65534 is refused on /v1/mcp as on /v1/run, and uid 4242's run
// through MCP is audited as 4242's.
func TestAttackMCPRouteRunsAsServer(t *testing.T) {
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("needs setpriv (util-linux)")
	}
	audit := filepath.Join(t.TempDir(), "audit.log")
	s := startServer(t, "--pool", "0", "--group", "nogroup", "--allow-uid", "4242", "--audit-log", audit)
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_python","arguments":{"code":"print(6*7)"}}}`
	curlAs := func(uid string) string {
		out, _ := exec.Command("setpriv", "--reuid", uid, "--regid", "65534", "--clear-groups",
			"curl", "-s", "-w", " %{http_code}", "--unix-socket", s.sock, "-H", "Content-Type: application/json",
			"-H", "Accept: application/json, text/event-stream", "-d", call, "http://x/v1/mcp").CombinedOutput()
		return string(out)
	}
	if out := curlAs("65534"); !strings.HasSuffix(out, " 403") || !strings.Contains(out, "uid 65534") {
		t.Errorf("uid 65534, not allowed: %s", out)
	}
	if out := curlAs("4242"); !strings.HasSuffix(out, " 200") || !strings.Contains(out, `42\n`) {
		t.Errorf("uid 4242, allowed: %s", out)
	}
	b, _ := os.ReadFile(audit)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var e AuditEntry
	if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &e) != nil || e.UID != 4242 || e.Verdict != "ok" {
		t.Errorf("audit log: want one run by uid 4242, got %q", b)
	}
}
