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

// needSessions skips while the server has no session routes (issue 19's
// sessions work): it answers 404 "no such endpoint" for them.
func needSessions(t *testing.T, s *testServer) {
	t.Helper()
	var e struct {
		Error string `json:"error"`
	}
	if code := s.get("/v1/sessions", &e); code == 404 && strings.Contains(e.Error, "no such endpoint") {
		t.Skip("this stockade serve has no /v1/sessions routes")
	}
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
	if err != nil || len(tools.Tools) != 7 {
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

// TestAttackMCPSessionOfAnotherUser: sessions made through /v1/mcp belong
// to the caller's uid, as those made on /v1/sessions do. Another uid that
// names the session_id in its own tool calls (run_python, download_file,
// close_session) is told there is no such session, and the session lives
// on for its owner. Were the route's in-process calls made under one
// identity for every caller, they would all be one owner.
func TestAttackMCPSessionOfAnotherUser(t *testing.T) {
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("needs setpriv (util-linux)")
	}
	s := startServer(t, "--pool", "0", "--group", "nogroup", "--allow-uid", "4242", "--allow-uid", "4243", "--audit-log", "")
	needSessions(t, s)
	callAs := func(uid, tool string, args map[string]any) map[string]any {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": map[string]any{"name": tool, "arguments": args}})
		out, err := exec.Command("setpriv", "--reuid", uid, "--regid", "65534", "--clear-groups",
			"curl", "-s", "--unix-socket", s.sock, "-H", "Content-Type: application/json",
			"-H", "Accept: application/json, text/event-stream", "--data-binary", string(body), "http://x/v1/mcp").Output()
		var resp struct {
			Result map[string]any `json:"result"`
		}
		if err != nil || json.Unmarshal(out, &resp) != nil || resp.Result == nil {
			t.Fatalf("uid %s %s: %v %s", uid, tool, err, out)
		}
		return resp.Result
	}
	text := func(r map[string]any) string {
		b, _ := json.Marshal(r["content"])
		return string(b)
	}
	created := callAs("4242", "create_session", map[string]any{})
	sc, _ := created["structuredContent"].(map[string]any)
	id, _ := sc["session_id"].(string)
	if id == "" {
		t.Fatalf("create_session as 4242: %v", created)
	}
	if r := callAs("4242", "run_python", map[string]any{"session_id": id, "code": "secret = 'of 4242'"}); r["isError"] == true {
		t.Fatalf("4242's own exec: %s", text(r))
	}
	callAs("4242", "upload_file", map[string]any{"session_id": id, "path": "key.txt", "content": "4242's key"})
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"run_python", map[string]any{"session_id": id, "code": "print(secret)"}},
		{"download_file", map[string]any{"session_id": id, "path": "key.txt"}},
		{"list_files", map[string]any{"session_id": id}},
		{"close_session", map[string]any{"session_id": id}},
	} {
		r := callAs("4243", c.tool, c.args)
		if r["isError"] != true || !strings.Contains(text(r), "404") || strings.Contains(text(r), "of 4242") || strings.Contains(text(r), "4242's key") {
			t.Errorf("uid 4243 %s on 4242's session: %s", c.tool, text(r))
		}
	}
	if r := callAs("4242", "run_python", map[string]any{"session_id": id, "code": "secret"}); r["isError"] == true || !strings.Contains(text(r), "of 4242") {
		t.Errorf("4242's session after 4243's tries: %s", text(r))
	}
	if r := callAs("4242", "close_session", map[string]any{"session_id": id}); r["isError"] == true {
		t.Errorf("close_session as 4242: %s", text(r))
	}
}

// TestServeMCPSession: a session made through one MCP connection is used
// through another (the transport keeps no session; the tools name it),
// with its files, and closed.
func TestServeMCPSession(t *testing.T) {
	s := startServer(t, "--pool", "1", "--audit-log", "")
	needSessions(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	call := func(cs *sdk.ClientSession, tool string, args map[string]any) (*sdk.CallToolResult, map[string]any) {
		t.Helper()
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		b, _ := json.Marshal(res.StructuredContent)
		var sc map[string]any
		json.Unmarshal(b, &sc)
		return res, sc
	}
	first := mcpSession(t, s)
	_, sc := call(first, "create_session", map[string]any{})
	id, _ := sc["session_id"].(string)
	if id == "" {
		t.Fatalf("create_session: %v", sc)
	}
	call(first, "run_python", map[string]any{"session_id": id, "code": "import os\nx = 40\nos.makedirs('out', exist_ok=True)\nopen('out/n.txt', 'w').write(str(x))"})
	first.Close()

	second := mcpSession(t, s)
	res, sc := call(second, "run_python", map[string]any{"session_id": id, "code": "x + 2"})
	if res.IsError || sc["result"] != "42" || sc["state"] != "kept" || !strings.Contains(mcpText(res), "result: 42") {
		t.Errorf("the session through a second connection: %s %v", mcpText(res), sc)
	}
	res, _ = call(second, "download_file", map[string]any{"session_id": id, "path": "out/n.txt"})
	if mcpText(res) != "40" {
		t.Errorf("download_file: %q", mcpText(res))
	}
	res, sc = call(second, "list_files", map[string]any{"session_id": id, "path": "out"})
	if res.IsError || !strings.Contains(mcpText(res), "n.txt") {
		t.Errorf("list_files: %s %v", mcpText(res), sc)
	}
	res, sc = call(second, "run_python", map[string]any{"session_id": id, "code": "import time\ntime.sleep(30)", "timeout_seconds": 1})
	if !res.IsError || sc["verdict"] != "timeout" || sc["state"] != "kept" {
		t.Errorf("an exec's timeout: %s", mcpText(res))
	}
	res, sc = call(second, "close_session", map[string]any{"session_id": id})
	if res.IsError || sc["verdict"] != "closed" {
		t.Errorf("close_session: %s", mcpText(res))
	}
	res, _ = call(second, "run_python", map[string]any{"session_id": id, "code": "x"})
	if !res.IsError || !strings.Contains(mcpText(res), "410") {
		t.Errorf("run_python on a closed session: %s", mcpText(res))
	}
}

// TestServeMCPBodyCaps: /v1/mcp's body is held to --max-body as /v1/run's
// is, before the SDK reads any of it.
func TestServeMCPBodyCaps(t *testing.T) {
	s := startServer(t, "--pool", "0", "--max-body", "4K", "--audit-log", "")
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_python","arguments":{"code":"` + strings.Repeat("#", 8192) + `"}}}`
	out, err := exec.Command("curl", "-s", "-w", " %{http_code}", "--unix-socket", s.sock, "-H", "Content-Type: application/json",
		"-H", "Accept: application/json, text/event-stream", "--data-binary", body, "http://x/v1/mcp").Output()
	if err != nil || !strings.HasSuffix(string(out), " 413") || !strings.Contains(string(out), "max-body") {
		t.Errorf("an 8 KiB body over --max-body 4K: %v %s", err, out)
	}
}

// postMCP sends one tools/call to /v1/mcp with curl and returns the answer
// and its status (" 200" at the end).
func postMCP(ctx context.Context, sock, tool string, args map[string]any) (string, error) {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": map[string]any{"name": tool, "arguments": args}})
	out, err := exec.CommandContext(ctx, "curl", "-s", "-w", " %{http_code}", "--unix-socket", sock, "-H", "Content-Type: application/json",
		"-H", "Accept: application/json, text/event-stream", "--data-binary", string(b), "http://x/v1/mcp").Output()
	return string(out), err
}

// mcpResult is a tools/call's result, as postMCP returned it.
func mcpResult(out string) (isError bool, structured map[string]any) {
	var resp struct {
		Result struct {
			IsError           bool           `json:"isError"`
			StructuredContent map[string]any `json:"structuredContent"`
		} `json:"result"`
	}
	if json.Unmarshal([]byte(strings.TrimSuffix(out, " 200")), &resp) != nil {
		return true, nil
	}
	return resp.Result.IsError, resp.Result.StructuredContent
}

// TestServeMCPAdmitsTheBodyOnce: a tool call's body is admitted once, by
// /v1/mcp, and the tool's run is made from it in process. Its tools
// re-sent each call to the server's own /v1/run, whose body took a second
// share of --body-budget while the first was held: a 7 KiB cell under a
// 12K budget waited --queue-wait for its own share and was refused busy.
// A run_python's timeout_seconds reaches the run in process too.
func TestServeMCPAdmitsTheBodyOnce(t *testing.T) {
	s := startServer(t, "--pool", "0", "--max-body", "8K", "--body-budget", "12K", "--queue-wait", "2s", "--audit-log", "")
	out, err := postMCP(context.Background(), s.sock, "run_python", map[string]any{"code": strings.Repeat("#", 7<<10) + "\nprint(6 * 7)"})
	if isError, sc := mcpResult(out); err != nil || isError || sc["stdout"] != "42\n" {
		t.Errorf("a 7 KiB cell under --body-budget 12K: %v %.400s", err, out)
	}
	out, err = postMCP(context.Background(), s.sock, "run_python", map[string]any{"code": "import time; time.sleep(60)", "timeout_seconds": 1})
	if isError, sc := mcpResult(out); err != nil || !isError || sc["verdict"] != "timeout" {
		t.Errorf("timeout_seconds 1 on a 60 s sleep: %v %.400s", err, out)
	}
}

// TestAttackMCPBodyOutsideBudget: /v1/mcp's body is the caller's request,
// admitted as /v1/run's is: while one call holds its share of
// --body-budget, a second whose body does not fit is refused 503 at the
// door, before the SDK or a tool sees it. Admitted without a share, a
// caller could hold any number of --max-body bodies through the route.
func TestAttackMCPBodyOutsideBudget(t *testing.T) {
	s := startServer(t, "--pool", "0", "--max-body", "8K", "--body-budget", "12K", "--queue-wait", "1s", "--audit-log", "")
	pad := strings.Repeat("#", 7<<10) + "\n"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Holds its share until cancelled.
	go postMCP(ctx, s.sock, "run_python", map[string]any{"code": pad + "import time; time.sleep(60)"})
	var h struct {
		Budget map[string]int64 `json:"budget"`
	}
	eventually(t, "the first call holds its body's share", func() bool {
		return s.get("/v1/health", &h) == 200 && h.Budget["body_bytes_used"] >= 7<<10
	})
	out, err := postMCP(context.Background(), s.sock, "run_python", map[string]any{"code": pad + "print(6 * 7)"})
	if err != nil || !strings.HasSuffix(out, " 503") || !strings.Contains(out, "body-budget") {
		t.Errorf("a second 7 KiB call while the first holds 7 KiB of a 12K --body-budget: %v %.300s", err, out)
	}
}
