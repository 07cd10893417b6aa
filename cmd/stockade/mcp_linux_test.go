package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stockade/stockade/client"
	"github.com/stockade/stockade/internal/proctest"
	"github.com/stockade/stockade/internal/testenv"
)

// These tests drive `stockade mcp` (the built binary) with the official Go
// SDK's client over stdio, as an MCP host launches it.

func mcpBin(t *testing.T) string {
	t.Helper()
	testenv.NeedJail(t)
	bin, err := filepath.Abs(testenv.NeedBinary(t, "the host launches the binary"))
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// mcpStdio launches `stockade mcp args...` and connects the SDK's client to
// it. Closing the session closes its stdin; the process must then exit.
func mcpStdio(t *testing.T, args ...string) (*sdk.ClientSession, *exec.Cmd, *proctest.Buffer) {
	t.Helper()
	cmd := exec.Command(mcpBin(t), append([]string{"mcp"}, args...)...)
	stderr := &proctest.Buffer{}
	cmd.Stderr = stderr
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "stockade-test", Version: "1"}, nil).
		Connect(ctx, &sdk.CommandTransport{Command: cmd, TerminateDuration: 30 * time.Second}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, stderr.String())
	}
	t.Cleanup(func() { cs.Close() })
	return cs, cmd, stderr
}

func mcpCall(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any) (*sdk.CallToolResult, string, map[string]any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var text strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	var sc map[string]any
	if res.StructuredContent != nil {
		b, _ := json.Marshal(res.StructuredContent)
		json.Unmarshal(b, &sc)
	}
	return res, text.String(), sc
}

func TestMCPStdioOwnPool(t *testing.T) {
	cs, cmd, stderr := mcpStdio(t, "--pool", "1")
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(tools.Tools) != 7 {
		t.Errorf("%d tools", len(tools.Tools))
	}
	res, text, sc := mcpCall(t, cs, "run_python", map[string]any{"code": "print(6*7)"})
	if res.IsError || !strings.Contains(text, "verdict: ok") || !strings.Contains(text, "42") || sc["verdict"] != "ok" {
		t.Errorf("print(6*7): isError %v\n%s\n%v", res.IsError, text, sc)
	}
	res, text, sc = mcpCall(t, cs, "run_python", map[string]any{"code": "1/0"})
	if !res.IsError || !strings.Contains(text, "ZeroDivisionError") || sc["verdict"] != "exit" {
		t.Errorf("1/0: isError %v\n%s", res.IsError, text)
	}
	res, text, _ = mcpCall(t, cs, "run_python", map[string]any{"code": "print(input())", "stdin": "from stdin\n"})
	if res.IsError || !strings.Contains(text, "from stdin") {
		t.Errorf("stdin: %s", text)
	}
	if !strings.Contains(stderr.String(), "running its own pool") {
		t.Errorf("stderr does not say which backend:\n%s", stderr.String())
	}
	sock := regexp.MustCompile(`private socket (\S+)`).FindStringSubmatch(stderr.String())
	// The SDK's Close closes stdin and waits for the process to exit.
	cs.Close()
	if st := cmd.ProcessState; st == nil || !st.Success() {
		t.Errorf("stockade mcp after its stdin closed: %v\n%s", st, stderr.String())
	}
	if !strings.Contains(stderr.String(), "every jail, cgroup and run directory removed") {
		t.Errorf("own pool did not say it removed everything:\n%s", stderr.String())
	}
	if sock == nil {
		t.Fatalf("no private socket named:\n%s", stderr.String())
	}
	if _, err := os.Stat(filepath.Dir(sock[1])); !os.IsNotExist(err) {
		t.Errorf("the private socket's directory is still there: %v", err)
	}
}

func TestMCPStdioPlot(t *testing.T) {
	needModules(t, "matplotlib")
	cs, _, _ := mcpStdio(t, "--pool", "0")
	res, text, _ := mcpCall(t, cs, "run_python", map[string]any{"code": "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])"})
	var images []*sdk.ImageContent
	for _, c := range res.Content {
		if ic, ok := c.(*sdk.ImageContent); ok {
			images = append(images, ic)
		}
	}
	if res.IsError || len(images) != 1 || images[0].MIMEType != "image/png" || !bytes.HasPrefix(images[0].Data, []byte("\x89PNG")) {
		t.Errorf("a figure: isError %v, %d images\n%s", res.IsError, len(images), text)
	}
}

// jailLimits runs code that reads the limits from inside the jail and
// returns the result's limits and the jail's own /proc/meminfo MemTotal.
func jailLimits(t *testing.T, cs *sdk.ClientSession) (map[string]any, int64) {
	t.Helper()
	res, text, sc := mcpCall(t, cs, "run_python", map[string]any{"code": "print(open('/proc/meminfo').readline().split()[1])"})
	if res.IsError {
		t.Fatalf("reading /proc/meminfo: %s", text)
	}
	kb, err := strconv.ParseInt(strings.TrimSpace(sc["stdout"].(string)), 10, 64)
	if err != nil {
		t.Fatalf("MemTotal: %v: %s", err, text)
	}
	limits, _ := sc["limits"].(map[string]any)
	return limits, kb * 1024
}

// TestAttackMCPToolArgumentsLoosenJail: the model asks, in its tool calls,
// for more memory, more time, another profile and the network. Each call is
// refused, and the jail it does get has the limits of stockade mcp's
// command line: own pool (the flags make the profile) and a server's
// (the flags ride along in every request).
func TestAttackMCPToolArgumentsLoosenJail(t *testing.T) {
	check := func(t *testing.T, cs *sdk.ClientSession) {
		for k, v := range map[string]any{"limits": map[string]any{"memory": "4G"}, "memory": "4G", "profile": "shell", "allow_net": []string{"*"}, "timeout": "1h"} {
			res, text, _ := mcpCall(t, cs, "run_python", map[string]any{"code": "print(1)", k: v})
			if !res.IsError || !strings.Contains(text, "additional properties") {
				t.Errorf("run_python with %s: not refused: %s", k, text)
			}
		}
		limits, memTotal := jailLimits(t, cs)
		if limits["memory_bytes"] != float64(100<<20) || limits["timeout_ms"] != float64(4000) {
			t.Errorf("the jail's limits are not the command line's (--memory 100M --timeout 4s): %v", limits)
		}
		if memTotal != 100<<20 {
			t.Errorf("the jail sees MemTotal %d bytes, not --memory 100M", memTotal)
		}
		res, text, _ := mcpCall(t, cs, "run_python", map[string]any{"code": "print(1)", "timeout_seconds": 60})
		if !res.IsError || !strings.Contains(text, "4s") {
			t.Errorf("timeout_seconds 60 over --timeout 4s: not refused: %s", text)
		}
		res, text, _ = mcpCall(t, cs, "run_python", map[string]any{"code": "import time; time.sleep(30)", "timeout_seconds": 1})
		if !res.IsError || !strings.Contains(text, "verdict: timeout") {
			t.Errorf("timeout_seconds 1 does not shorten the run: %s", text)
		}
	}
	t.Run("own pool", func(t *testing.T) {
		cs, _, _ := mcpStdio(t, "--pool", "0", "--memory", "100M", "--timeout", "4s")
		check(t, cs)
	})
	t.Run("server", func(t *testing.T) {
		sock := startServe(t)
		cs, _, stderr := mcpStdio(t, "--server", sock, "--memory", "100M", "--timeout", "4s")
		check(t, cs)
		if !strings.Contains(stderr.String(), "using the server at "+sock) {
			t.Errorf("stderr does not say which backend:\n%s", stderr.String())
		}
	})
}

// needSessions skips while stockade serve has no session routes (issue
// 19's sessions work): it answers 404 "no such endpoint" for them.
func needSessions(t *testing.T, sock string) {
	t.Helper()
	cl, err := client.New(sock, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = cl.Sessions(context.Background())
	var refused *client.Error
	if errors.As(err, &refused) && refused.Status == 404 && strings.Contains(refused.Body.Msg, "no such endpoint") {
		t.Skip("this stockade serve has no /v1/sessions routes")
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestMCPServerRefusesJailFlags: with --server, a flag the request cannot
// carry is refused (exit 125), never dropped: a dropped --allow-net or
// --work-size would leave the server profile's in force unnoticed.
func TestMCPServerRefusesJailFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--allow-net", "example.com"},
		{"--work-size", "1M"},
		{"--pool", "3"},
		{"--env", "A=1"},
	} {
		code, out, errs := invoke(t, "", append([]string{"mcp", "--server", "/nonexistent/s.sock"}, args...)...)
		if code != 125 || out != "" || !strings.Contains(errs, args[0]+": not with --server") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errs)
		}
	}
	code, _, errs := invoke(t, "", "mcp", "--server", "/nonexistent/s.sock")
	if code != 125 || !strings.Contains(errs, "/nonexistent/s.sock") || !strings.Contains(errs, "no server answers") {
		t.Errorf("a server that is not there: exit %d, %q", code, errs)
	}
	code, _, errs = invoke(t, "", "mcp", "--http", "0.0.0.0:0")
	if code != 125 || !strings.Contains(errs, "loopback") {
		t.Errorf("--http on all addresses: exit %d, %q", code, errs)
	}
}

// TestMCPStdioSessionOutlivesConnection: MCP hosts restart their servers
// and drop connections; a session lives in the stockade server, named by
// its session_id, so a second `stockade mcp` process finds its state.
func TestMCPStdioSessionOutlivesConnection(t *testing.T) {
	sock := startServe(t)
	needSessions(t, sock)
	first, _, _ := mcpStdio(t, "--server", sock)
	_, text, sc := mcpCall(t, first, "create_session", nil)
	id, _ := sc["session_id"].(string)
	if id == "" || !strings.Contains(text, id) {
		t.Fatalf("create_session: %s", text)
	}
	if res, text, _ := mcpCall(t, first, "run_python", map[string]any{"session_id": id, "code": "x = 41"}); res.IsError {
		t.Fatalf("x = 41: %s", text)
	}
	first.Close()
	second, _, _ := mcpStdio(t, "--server", sock)
	res, text, sc := mcpCall(t, second, "run_python", map[string]any{"session_id": id, "code": "x + 1"})
	if res.IsError || sc["result"] != "42" || sc["execution_count"] != float64(2) {
		t.Errorf("x + 1 through a second stockade mcp: %s %v", text, sc)
	}
	if res, text, _ := mcpCall(t, second, "close_session", map[string]any{"session_id": id}); res.IsError || !strings.Contains(text, "closed") {
		t.Errorf("close_session: %s", text)
	}
}

// TestMCPStdioOwnPoolSession: sessions in a pool of stockade mcp's own.
func TestMCPStdioOwnPoolSession(t *testing.T) {
	needSessions(t, startServe(t))
	cs, _, _ := mcpStdio(t, "--pool", "1")
	_, _, sc := mcpCall(t, cs, "create_session", nil)
	id, _ := sc["session_id"].(string)
	mcpCall(t, cs, "upload_file", map[string]any{"session_id": id, "path": "in.txt", "content": "6"})
	res, text, sc := mcpCall(t, cs, "run_python", map[string]any{"session_id": id, "code": "n = int(open('in.txt').read())\nn * 7"})
	if res.IsError || sc["result"] != "42" {
		t.Errorf("a cell reading an uploaded file: %s", text)
	}
	if res, text, _ := mcpCall(t, cs, "close_session", map[string]any{"session_id": id}); res.IsError {
		t.Errorf("close_session: %s", text)
	}
}

// TestMCPDocsHostConfigs launches each host configuration of docs/mcp.md
// as an MCP host does (command, args, env from the JSON) and runs a cell;
// the server's socket of the configuration is a test server's.
func TestMCPDocsHostConfigs(t *testing.T) {
	bin := mcpBin(t)
	doc, err := os.ReadFile("../../docs/mcp.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```json\n(.*?)```").FindAllSubmatch(doc, -1)
	if len(blocks) < 2 {
		t.Fatalf("docs/mcp.md: %d JSON configurations", len(blocks))
	}
	sock := startServe(t)
	for i, b := range blocks {
		var cfg struct {
			MCPServers map[string]struct {
				Command string            `json:"command"`
				Args    []string          `json:"args"`
				Env     map[string]string `json:"env"`
			} `json:"mcpServers"`
		}
		if err := json.Unmarshal(b[1], &cfg); err != nil {
			t.Fatalf("docs/mcp.md configuration %d: %v\n%s", i+1, err, b[1])
		}
		srv, ok := cfg.MCPServers["stockade"]
		if !ok || srv.Command != "stockade" || len(srv.Args) == 0 || srv.Args[0] != "mcp" {
			t.Fatalf("configuration %d does not launch stockade mcp: %s", i+1, b[1])
		}
		args := append([]string(nil), srv.Args...)
		for j, a := range args {
			args[j] = strings.ReplaceAll(a, defaultSocket, sock)
		}
		cmd := exec.Command(bin, args...)
		cmd.Env = os.Environ()
		for k, v := range srv.Env {
			cmd.Env = append(cmd.Env, k+"="+strings.ReplaceAll(v, defaultSocket, sock))
		}
		stderr := &proctest.Buffer{}
		cmd.Stderr = stderr
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "host", Version: "1"}, nil).
			Connect(ctx, &sdk.CommandTransport{Command: cmd, TerminateDuration: 30 * time.Second}, nil)
		cancel()
		if err != nil {
			t.Fatalf("configuration %d: connect: %v\n%s", i+1, err, stderr.String())
		}
		res, text, _ := mcpCall(t, cs, "run_python", map[string]any{"code": "print(6*7)"})
		if res.IsError || !strings.Contains(text, "42") {
			t.Errorf("configuration %d: %s\n%s", i+1, text, stderr.String())
		}
		cs.Close()
	}
}

// TestAttackMCPOwnPoolSessionsUncapped: `stockade mcp` with a pool of its
// own made its server from a zero Config: no session cap at all (40 of 40
// create_session calls succeeded, 2.5 GB), for whoever reached its --http
// port. It runs with serve's defaults (server.Defaults): every caller of
// this process is its own uid, so --sessions-per-caller 8 is its cap.
func TestAttackMCPOwnPoolSessionsUncapped(t *testing.T) {
	cs, _, stderr := mcpStdio(t, "--pool", "0", "--memory", "64M")
	const perCaller = 8 // server.Defaults().SessionsPerCaller, as serve's help says
	var ids []string
	for i := range perCaller + 1 {
		res, text, sc := mcpCall(t, cs, "create_session", nil)
		if i < perCaller {
			id, _ := sc["session_id"].(string)
			if res.IsError || id == "" {
				t.Fatalf("session %d of %d: %s\n%s", i+1, perCaller, text, stderr.String())
			}
			ids = append(ids, id)
			continue
		}
		if !res.IsError || !strings.Contains(text, "429") || !strings.Contains(text, "sessions-per-caller") {
			t.Errorf("session %d, past the cap of %d: isError %v, %s", i+1, perCaller, res.IsError, text)
		}
	}
	for _, id := range ids {
		mcpCall(t, cs, "close_session", map[string]any{"session_id": id})
	}
}

// TestAttackMCPServerLimitsMissPoolSilently: docs/mcp.md's first host
// configuration sends --memory 256M with every call; the server's prepared
// jails have its profile's 512M, so every call took a fresh jail, and
// nothing said so. stockade mcp says it on stderr, once, naming the flag;
// without limit flags the pool serves and nothing is said.
func TestAttackMCPServerLimitsMissPoolSilently(t *testing.T) {
	sock := startServeWith(t, "--pool", "1")
	const notice = "not a prepared one"
	cs, _, stderr := mcpStdio(t, "--server", sock, "--memory", "256M", "--timeout", "5s")
	for range 2 {
		res, text, sc := mcpCall(t, cs, "run_python", map[string]any{"code": "print(6*7)"})
		if pool, _ := sc["pool"].(map[string]any); res.IsError || pool["hit"] != false {
			t.Fatalf("run_python with --memory 256M: %s %v", text, sc["pool"])
		}
	}
	if got := stderr.String(); strings.Count(got, notice) != 1 || !strings.Contains(got, "--memory 256M") {
		t.Errorf("stderr, after two calls that missed the pool for --memory 256M: want one notice naming it:\n%s", got)
	}
	cs.Close()
	cs, _, stderr = mcpStdio(t, "--server", sock, "--timeout", "5s")
	var hit bool
	for range 20 { // the pool refills behind each call
		_, _, sc := mcpCall(t, cs, "run_python", map[string]any{"code": "print(6*7)"})
		if pool, _ := sc["pool"].(map[string]any); pool["hit"] == true {
			hit = true
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !hit || strings.Contains(stderr.String(), notice) {
		t.Errorf("without limit flags: pool hit %v, stderr:\n%s", hit, stderr.String())
	}
}

// TestAttackMCPServerSessionLimitsDropped: with --server, the limit flags
// ride along with create_session as with run_python; dropped there, the
// model's session got the server profile's 512M and 10 s while the
// command line said 100M and 4 s. The session reports the command line's
// limits, and its jail sees 100M.
func TestAttackMCPServerSessionLimitsDropped(t *testing.T) {
	sock := startServe(t)
	needSessions(t, sock)
	cs, _, _ := mcpStdio(t, "--server", sock, "--memory", "100M", "--timeout", "4s")
	res, text, sc := mcpCall(t, cs, "create_session", nil)
	id, _ := sc["session_id"].(string)
	if res.IsError || id == "" {
		t.Fatalf("create_session: %s", text)
	}
	defer mcpCall(t, cs, "close_session", map[string]any{"session_id": id})
	if limits, _ := sc["limits"].(map[string]any); limits["memory_bytes"] != float64(100<<20) || limits["timeout_ms"] != float64(4000) {
		t.Errorf("the session's limits are not the command line's (--memory 100M --timeout 4s): %v", sc["limits"])
	}
	res, text, sc = mcpCall(t, cs, "run_python", map[string]any{"session_id": id, "code": "int(open('/proc/meminfo').readline().split()[1]) * 1024"})
	if res.IsError || sc["result"] != strconv.Itoa(100<<20) {
		t.Errorf("the session's jail sees MemTotal %v, not --memory 100M: %s", sc["result"], text)
	}
}
