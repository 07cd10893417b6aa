package gateway

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/certtest"
	"github.com/stockade/stockade/internal/proctest"
	"github.com/stockade/stockade/internal/testenv"
)

// The gateway for real: one nats-server (STOCKADE_NATS_SERVER, TLS on
// loopback, JetStream), one `stockade serve --cluster` node and `stockade
// gateway` (STOCKADE_BIN), both as processes; a run and a session's execs
// over HTTPS with a token, and another tenant's token answered 404 for
// that session by the real cluster.
func TestGatewayEndToEnd(t *testing.T) {
	e := startE2E(t)
	tg, node, gw, caFile, tenants, audit := e.tg, e.node, e.gw, e.caFile, e.tenants, e.audit
	c := tg.client(t, nil)
	c.Timeout = proctest.Budget(t, 120*time.Second)
	code, body := tg.do(t, c, "POST", "/v1/run", tokenAlice, `{"code":"print(6 * 7)"}`, map[string]string{"Idempotency-Key": "e2e-run-1"})
	if code != 200 || !strings.Contains(body, `"stdout":"42\n"`) {
		t.Fatalf("a run through the gateway: %d %s\nnode:\n%s", code, body, node.Stdout())
	}
	code, body = tg.do(t, c, "POST", "/v1/sessions", tokenAlice, `{}`, nil)
	var made struct {
		SessionID string `json:"session_id"`
	}
	if code != 201 || json.Unmarshal([]byte(body), &made) != nil || made.SessionID == "" {
		t.Fatalf("a session through the gateway: %d %s", code, body)
	}
	execPath := "/v1/sessions/" + made.SessionID + "/exec"
	if code, body := tg.do(t, c, "POST", execPath, tokenAlice, `{"code":"x = 40"}`, nil); code != 200 {
		t.Fatalf("the session's first exec: %d %s", code, body)
	}
	if code, body := tg.do(t, c, "POST", execPath, tokenAlice, `{"code":"print(x + 2)"}`, nil); code != 200 || !strings.Contains(body, `"stdout":"42\n"`) {
		t.Fatalf("the session's second exec: %d %s", code, body)
	}
	// Bob, a valid tenant, is told there is no such session.
	if code, body := tg.do(t, c, "POST", execPath, tokenBob, `{"code":"print(x)"}`, nil); code != 404 {
		t.Fatalf("bob's exec in alice's session: %d %s, want 404", code, body)
	}
	if code, _ := tg.do(t, c, "POST", execPath, "", `{"code":"print(x)"}`, nil); code != 401 {
		t.Fatalf("no token: %d, want 401", code)
	}
	if code, body := tg.do(t, c, "DELETE", "/v1/sessions/"+made.SessionID, tokenAlice, "", nil); code != 200 {
		t.Fatalf("ending the session: %d %s", code, body)
	}
	// The Python client, from $STOCKADE_URL and $STOCKADE_TOKEN: a run
	// and a session's two cells, through the same gateway.
	py := exec.Command("/usr/bin/python3", "-c", `
from stockade import Client
c = Client(ca_file=`+fmt.Sprintf("%q", caFile)+`, timeout=120)
print(c.run("print(6 * 7)").stdout.strip())
with c.session() as s:
    s.run("y = 20")
    print(s.run("print(y + 1)").stdout.strip())
`)
	py.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(repoRoot(t), "clients", "python"),
		"STOCKADE_URL=https://"+tg.addr, "STOCKADE_TOKEN="+tokenAlice)
	if o := proctest.Run(t, py, proctest.Budget(t, 180*time.Second)); o.Code() != 0 || strings.Fields(o.Stdout)[0] != "42" || !strings.Contains(o.Stdout, "21") {
		t.Fatalf("the Python client through the gateway: exit %d\n%s\n%s", o.Code(), o.Stdout, o.Stderr)
	}
	runCLI(t, e)
	// Bob's max_sessions (2) is held across the cluster: the gateway
	// counts his sessions through it.
	var bobs []string
	for i := 0; i < 2; i++ {
		code, body := tg.do(t, c, "POST", "/v1/sessions", tokenBob, `{}`, nil)
		var s struct {
			SessionID string `json:"session_id"`
		}
		if code != 201 || json.Unmarshal([]byte(body), &s) != nil {
			t.Fatalf("bob's session %d: %d %s", i, code, body)
		}
		bobs = append(bobs, s.SessionID)
	}
	if code, body := tg.do(t, c, "POST", "/v1/sessions", tokenBob, `{}`, nil); code != 429 {
		t.Fatalf("bob's third session (max_sessions 2): %d %s, want 429", code, body)
	}
	for _, id := range bobs {
		if code, body := tg.do(t, c, "DELETE", "/v1/sessions/"+id, tokenBob, "", nil); code != 200 {
			t.Fatalf("ending bob's session: %d %s", code, body)
		}
	}
	code, body = tg.do(t, c, "GET", "/v1/metrics", tokenOps, "", nil)
	if code != 200 || !strings.Contains(body, "stockade_gateway_forwarded_total") || !strings.Contains(body, "stockade_cluster_") {
		t.Fatalf("metrics: %d %s", code, body)
	}
	log, _ := os.ReadFile(audit)
	if !strings.Contains(string(log), `"tenant":"bob"`) || strings.Contains(string(log), tokenAlice) {
		t.Fatalf("the gateway's audit log:\n%s", log)
	}

	// An operator's SIGHUP: alice's token replaced by carol's in the
	// tenants file, the audit log rotated away; the gateway takes both
	// without a restart.
	carol := strings.Repeat("e5", 20)
	next := strings.Replace(testTenants, tokenAlice, carol, 1)
	if err := os.WriteFile(tenants, []byte(next), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(audit, audit+".1"); err != nil {
		t.Fatal(err)
	}
	if err := gw.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if !gw.Await(proctest.Budget(t, 30*time.Second), "tenants reloaded") {
		t.Fatalf("no reload after SIGHUP:\n%s", gw.Stdout())
	}
	if code, _ := tg.do(t, c, "GET", "/v1/health", "", "", nil); code != 200 {
		t.Fatalf("health after SIGHUP: %d", code)
	}
	if code, body := tg.do(t, c, "POST", "/v1/run", carol, `{"code":"print(1)"}`, nil); code != 200 {
		t.Fatalf("the token added before SIGHUP: %d %s", code, body)
	}
	if code, _ := tg.do(t, c, "POST", "/v1/run", tokenAlice, `{"code":"print(1)"}`, nil); code != 401 {
		t.Fatalf("the token removed before SIGHUP: %d, want 401", code)
	}
	if log, err := os.ReadFile(audit); err != nil || !strings.Contains(string(log), `"tenant":"alice"`) {
		t.Fatalf("the audit log was not reopened on SIGHUP: %v\n%s", err, log)
	}
}

// e2e is the real thing the end-to-end tests run against: a nats-server,
// the gateway binary and one `stockade serve --cluster` node, all stopped
// with the test.
type e2e struct {
	tg             *testGateway
	bin            string // the stockade binary
	caFile         string // the CA of the gateway's (and NATS's) certificate
	tenants, audit string // the gateway's tenants file and audit log
	nodeAudit      string // the node's audit log
	gw, node       *proctest.Proc
}

// startE2E starts the processes of e2e (skipping without root, the binary
// or STOCKADE_NATS_SERVER) and returns once the node takes work.
func startE2E(t *testing.T) *e2e {
	t.Helper()
	testenv.NeedRoot(t, "the node starts real jails")
	bin := testenv.NeedBinary(t, "the node and the gateway are the built stockade")
	natsBin := os.Getenv("STOCKADE_NATS_SERVER")
	if natsBin == "" {
		t.Skip("set STOCKADE_NATS_SERVER to a nats-server (make test installs one into build/nats)")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ca := certtest.NewCA(t, "stockade e2e CA")
	cert, key := issue(t, ca, "gateway", false) // for 127.0.0.1: NATS's and the gateway's
	certFile := writeFile(t, dir, "server.crt", cert, 0o644)
	keyFile := writeFile(t, dir, "server.key", key, 0o600)
	caFile := writeFile(t, dir, "ca.crt", ca.PEM, 0o644)

	natsPort, gwPort := freePort(t), freePort(t)
	pw := func(role string) string { return fmt.Sprintf("pw-%s-%d", role, os.Getpid()) }
	conf := fmt.Sprintf(`listen: "127.0.0.1:%d"
tls: { cert_file: %q, key_file: %q, ca_file: %q, timeout: 5 }
max_payload: 16MB
jetstream { store_dir: %q, max_memory_store: 64MB, max_file_store: 256MB }
authorization { users: [ { user: gateway, password: %q }, { user: n1, password: %q } ] }
`, natsPort, certFile, keyFile, caFile, filepath.Join(dir, "js"), pw("gateway"), pw("n1"))
	natsConf := writeFile(t, dir, "nats.conf", []byte(conf), 0o600)
	nats := startProc(t, exec.Command(natsBin, "-c", natsConf))
	waitListening(t, nats, natsPort)

	clusterFile := func(role, node string) string {
		c := map[string]any{"urls": []string{fmt.Sprintf("tls://127.0.0.1:%d", natsPort)}, "ca": caFile,
			"user": role, "password": pw(role), "grace": "6s", "request_timeout": "60s", "results_max_bytes": 64 << 20}
		if node != "" {
			c["node"] = node
		}
		b, _ := json.Marshal(c)
		return writeFile(t, dir, role+".json", b, 0o600)
	}
	// The gateway first: it makes the stream and the buckets.
	tenants := writeFile(t, dir, "tenants.toml", []byte(testTenants), 0o600)
	audit := filepath.Join(dir, "gateway-audit.log")
	gw := startProc(t, exec.Command(bin, "gateway", "--listen", fmt.Sprintf("127.0.0.1:%d", gwPort), "--cert", certFile, "--key", keyFile,
		"--tenants", tenants, "--cluster", clusterFile("gateway", ""), "--audit-log", audit))
	t.Cleanup(func() { stopProc(t, gw) })
	if !gw.Await(proctest.Budget(t, 30*time.Second), "serving HTTPS") {
		t.Fatalf("the gateway did not start:\n%s", gw.Stdout())
	}

	nodeAudit := filepath.Join(dir, "node-audit.log")
	node := startProc(t, exec.Command(bin, "serve", "--socket", filepath.Join(dir, "s.sock"), "--cluster", clusterFile("n1", "n1"),
		"--audit-log", nodeAudit, "--concurrency", "2", "--pool", "1", "--grace", "5s"))
	t.Cleanup(func() { stopProc(t, node) })
	if !node.Await(proctest.Budget(t, 90*time.Second), "taking work") {
		t.Fatalf("the node did not join:\n%s", node.Stdout())
	}
	return &e2e{tg: &testGateway{addr: fmt.Sprintf("127.0.0.1:%d", gwPort), ca: ca}, bin: bin, caFile: caFile,
		tenants: tenants, audit: audit, nodeAudit: nodeAudit, gw: gw, node: node}
}

// repoRoot is the repository's top directory (the test runs in gateway/).
func repoRoot(t *testing.T) string {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(wd)
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startProc starts cmd with one stream for its stdout and stderr, killed
// with the test.
func startProc(t *testing.T, cmd *exec.Cmd) *proctest.Proc {
	t.Helper()
	var out proctest.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	p, err := proctest.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case <-p.Done():
		default:
			p.Kill()
		}
	})
	return p
}

// stopProc sends SIGTERM and waits for the end, as an operator's stop.
func stopProc(t *testing.T, p *proctest.Proc) {
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	if o := p.Wait(proctest.Budget(t, 60*time.Second)); o.Expired {
		t.Errorf("%v did not stop within its budget of SIGTERM:\n%s", p.Cmd.Args[:2], o.Stdout)
	}
}

func waitListening(t *testing.T, p *proctest.Proc, port int) {
	t.Helper()
	deadline := time.Now().Add(proctest.Budget(t, 20*time.Second))
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-p.Done():
			t.Fatalf("%s ended: %s", p.Cmd.Path, p.Stdout())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not listening on %d: %v\n%s", p.Cmd.Path, port, err, p.Stdout())
		}
	}
}

// runCLI is `stockade run --server https://...` through e's gateway, as a
// user types it: the token from $STOCKADE_TOKEN (or --token, which wins),
// the gateway's CA from --ca-file, stdin carried, the output streamed and
// the run's exit status the command's; the gateway's refusals (a wrong
// token, a limit above the tenant's cap) are stockade's own exit 125 with
// the gateway's reason.
func runCLI(t *testing.T, e *e2e) {
	t.Helper()
	server := "https://" + e.tg.addr
	cli := func(token string, stdin string, args ...string) (int, string, string) {
		t.Helper()
		cmd := exec.Command(e.bin, append([]string{"run", "--server", server, "--ca-file", e.caFile}, args...)...)
		cmd.Env = append(os.Environ(), "STOCKADE_TOKEN="+token)
		cmd.Stdin = strings.NewReader(stdin)
		o := proctest.Run(t, cmd, proctest.Budget(t, 120*time.Second))
		return o.Code(), o.Stdout, o.Stderr
	}
	code, out, errs := cli(tokenAlice, "from stdin", "--memory", "200M", "--",
		"python3", "-c", "import os, sys; print(sys.stdin.read().upper(), os.getuid()); sys.exit(3)")
	if code != 3 || !strings.HasPrefix(out, "FROM STDIN ") {
		t.Fatalf("run --server through the gateway: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	code, out, errs = cli(tokenAlice, "", "--json", "--", "python3", "-c", "print(6 * 7)")
	var res struct {
		Verdict string `json:"verdict"`
		Stdout  string `json:"stdout"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.Verdict != "ok" || res.Stdout != "42\n" {
		t.Fatalf("run --server --json: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	// --token over $STOCKADE_TOKEN: the environment's good token loses to
	// the flag's wrong one.
	if code, _, errs := cli(tokenAlice, "", "--token", strings.Repeat("f0", 20), "--", "true"); code != 125 || !strings.Contains(errs, "401") {
		t.Fatalf("a wrong --token: exit %d, stderr %q; want 125 naming the 401", code, errs)
	}
	// Bob's memory cap is 256M: the flag's 1G is the tenant policy's 422.
	if code, _, errs := cli(tokenBob, "", "--memory", "1G", "--", "true"); code != 125 || !strings.Contains(errs, "422") || !strings.Contains(errs, "256M") {
		t.Fatalf("--memory above bob's cap: exit %d, stderr %q; want 125 naming the 422", code, errs)
	}
	// Without --ca-file the system's roots do not know the test CA.
	cmd := exec.Command(e.bin, "run", "--server", server, "--", "true")
	cmd.Env = append(os.Environ(), "STOCKADE_TOKEN="+tokenAlice)
	if o := proctest.Run(t, cmd, proctest.Budget(t, 60*time.Second)); o.Code() != 125 || !strings.Contains(o.Stderr, "certificate") {
		t.Fatalf("no --ca-file: exit %d, stderr %q; want 125 naming the certificate", o.Code(), o.Stderr)
	}
}

// The official MCP TypeScript SDK's client (npm, pinned in
// tests/mcp-sdk's lockfile) through the real gateway's POST /v1/mcp:
// Streamable HTTP over HTTPS with a bearer token, the test CA given to
// Node by NODE_EXTRA_CA_CERTS; run_python, a session made, used (its
// state kept) and closed, no token refused, a tenant's cap held; then the
// same over stdio through `stockade mcp --server https://...` with
// $STOCKADE_TOKEN and --ca-file (tests/mcp-sdk/gateway.mjs). make test-mcp-sdk runs it after npm ci,
// with STOCKADE_MCP_SDK naming tests/mcp-sdk; without it, it skips.
func TestGatewayMCPSDKClient(t *testing.T) {
	sdkDir := os.Getenv("STOCKADE_MCP_SDK")
	if sdkDir == "" {
		t.Skip("set STOCKADE_MCP_SDK to tests/mcp-sdk with its node_modules (make test-mcp-sdk does, after npm ci)")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node on PATH (Debian: apt-get install nodejs)")
	}
	if _, err := os.Stat(filepath.Join(sdkDir, "node_modules", "@modelcontextprotocol", "sdk", "package.json")); err != nil {
		t.Fatalf("STOCKADE_MCP_SDK=%s has no SDK installed (npm ci --prefix %s): %v", sdkDir, sdkDir, err)
	}
	e := startE2E(t)
	cmd := exec.Command(node, filepath.Join(sdkDir, "gateway.mjs"))
	cmd.Env = append(os.Environ(), "MCP_URL=https://"+e.tg.addr+"/v1/mcp", "MCP_TOKEN="+tokenAlice,
		"MCP_TOKEN_CAPPED="+tokenBob, fmt.Sprintf("MCP_CAPPED_MEMORY=%d", 256<<20), "NODE_EXTRA_CA_CERTS="+e.caFile, "STOCKADE_BIN="+e.bin)
	o := proctest.Run(t, cmd, proctest.Budget(t, 300*time.Second))
	if o.Code() != 0 || !strings.Contains(o.Stdout, "0 failed") {
		t.Fatalf("the MCP SDK's client through the gateway: exit %d\n%s\n%s\nnode:\n%s", o.Code(), o.Stdout, o.Stderr, e.node.Stdout())
	}
	t.Log(strings.TrimSpace(o.Stdout))
	// The tools ran as their tenants on the node (the gateway's audit
	// has the /v1/mcp requests; the node's, what the tools asked of it).
	log, err := os.ReadFile(e.nodeAudit)
	if err != nil {
		t.Fatal(err)
	}
	var runs, execs []string // a run's "tenant memory", an exec's state
	for _, line := range strings.Split(strings.TrimSpace(string(log)), "\n") {
		var ev struct {
			Event, Tenant, State string
			Limits               struct {
				MemoryBytes int64 `json:"memory_bytes"`
			}
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("the node's audit log: %v: %s", err, line)
		}
		switch ev.Event {
		case "end":
			runs = append(runs, fmt.Sprintf("%s %d", ev.Tenant, ev.Limits.MemoryBytes))
		case "exec_end":
			execs = append(execs, ev.State)
		}
		// A session's lines name its tenant too, as a run's do.
		if strings.HasPrefix(ev.Event, "session_") || strings.HasPrefix(ev.Event, "exec_") {
			if ev.Tenant != "alice" {
				t.Errorf("the node's %s line names tenant %q, want alice: %s", ev.Event, ev.Tenant, line)
			}
		}
	}
	// Over HTTP: alice's run, bob's at his cap; over stdio: alice's run;
	// each time a session's two execs.
	if len(runs) != 3 || !strings.HasPrefix(runs[0], "alice ") || runs[1] != fmt.Sprintf("bob %d", 256<<20) || runs[2] != runs[0] ||
		strings.Join(execs, " ") != "kept kept kept kept" {
		t.Fatalf("the node's audit log has runs %q and execs %q; want alice's, bob's at his cap, alice's, and four kept:\n%s", runs, execs, log)
	}
}
