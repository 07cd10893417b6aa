package gateway

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/certtest"
)

// Tenant B must not reach tenant A's session: the backend is told the
// tenant, and answers 404 for another's, as the server does for another
// uid's. The gateway passes the tenant its token names, never one the
// caller writes.
func TestAttackOtherTenantSession(t *testing.T) {
	tg := startGateway(t, nil)
	c := tg.client(t, nil)
	code, body := tg.do(t, c, "POST", "/v1/sessions", tokenAlice, `{}`, nil)
	if code != 201 {
		t.Fatalf("alice's session: %d %s", code, body)
	}
	var made struct {
		SessionID string `json:"session_id"`
	}
	if err := json.Unmarshal([]byte(body), &made); err != nil || made.SessionID == "" {
		t.Fatalf("session answer %q: %v", body, err)
	}
	exec := "/v1/sessions/" + made.SessionID + "/exec"
	if code, body := tg.do(t, c, "POST", exec, tokenAlice, `{"code":"1+1"}`, nil); code != 200 {
		t.Fatalf("alice's exec in her session: %d %s", code, body)
	}
	// Bob, with his own valid token, and a header naming alice that the
	// gateway must not take.
	code, body = tg.do(t, c, "POST", exec, tokenBob, `{"code":"1+1"}`, map[string]string{"X-Stockade-Tenant": "alice"})
	if code != 404 {
		t.Fatalf("bob's exec in alice's session: %d %s, want 404", code, body)
	}
	if got := tg.backend.last(); got.tenant != "bob" {
		t.Fatalf("the backend was told tenant %q for bob's token", got.tenant)
	}
}

// No token, a wrong token, a token of the right length with one byte
// changed, a scheme that is not Bearer: 401, and the backend sees none.
func TestAttackNoOrWrongToken(t *testing.T) {
	tg := startGateway(t, nil)
	c := tg.client(t, nil)
	near := tokenAlice[:len(tokenAlice)-1] + "x"
	for _, tc := range []struct{ name, auth string }{
		{"none", ""},
		{"wrong", "Bearer " + strings.Repeat("z", 40)},
		{"one byte off", "Bearer " + near},
		{"prefix", "Bearer " + tokenAlice[:20]},
		{"longer", "Bearer " + tokenAlice + "x"},
		{"basic", "Basic " + tokenAlice},
		{"empty bearer", "Bearer "},
		{"huge", "Bearer " + strings.Repeat("a1", 4000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hdr := map[string]string{}
			if tc.auth != "" {
				hdr["Authorization"] = tc.auth
			}
			code, body := tg.do(t, c, "POST", "/v1/run", "", `{"code":"print(1)"}`, hdr)
			if code != 401 {
				t.Fatalf("%d %s, want 401", code, body)
			}
		})
	}
	if n := tg.backend.callCount(); n != 0 {
		t.Fatalf("%d requests reached the backend without a valid token", n)
	}
	if code, _ := tg.do(t, c, "POST", "/v1/run", tokenAlice, `{"code":"print(1)"}`, nil); code != 200 {
		t.Fatalf("alice's own token: %d", code)
	}
}

// The token compare must take the same time whatever the guess: ByToken
// compares with subtle.ConstantTimeCompare, over every token, without
// leaving the loop early. Timing cannot be asserted under load, so the
// code is: its shape is what holds.
func TestAttackTokenTimingCompare(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "tenants.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var fn *ast.FuncDecl
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == "ByToken" {
			fn = fd
		}
	}
	if fn == nil {
		t.Fatal("no ByToken in tenants.go")
	}
	var constantTime bool
	var loops int
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.SelectorExpr:
			if id, ok := x.X.(*ast.Ident); ok && id.Name == "subtle" && x.Sel.Name == "ConstantTimeCompare" {
				constantTime = true
			}
			if id, ok := x.X.(*ast.Ident); ok && (id.Name == "bytes" || id.Name == "strings") {
				t.Errorf("ByToken calls %s.%s: not constant time", id.Name, x.Sel.Name)
			}
		case *ast.BinaryExpr:
			if x.Op == token.EQL || x.Op == token.NEQ {
				if _, isLit := x.Y.(*ast.BasicLit); !isLit {
					t.Errorf("ByToken compares with %s at %v", x.Op, fset.Position(x.Pos()))
				}
			}
		case *ast.RangeStmt, *ast.ForStmt:
			loops++
			ast.Inspect(x, func(m ast.Node) bool {
				switch y := m.(type) {
				case *ast.ReturnStmt:
					t.Errorf("ByToken returns from inside its loop at %v: the time tells which token matched", fset.Position(y.Pos()))
				case *ast.BranchStmt:
					t.Errorf("ByToken leaves its loop early at %v", fset.Position(y.Pos()))
				}
				return true
			})
		}
		return true
	})
	if !constantTime || loops != 1 {
		t.Fatalf("ByToken: subtle.ConstantTimeCompare %v, %d loops over the tokens; want true, 1", constantTime, loops)
	}
	// And it answers as it must.
	ts, err := parseTenants("t", []byte(testTenants))
	if err != nil {
		t.Fatal(err)
	}
	if ts.ByToken(tokenBob).Name != "bob" || ts.ByToken(tokenBob+"x") != nil || ts.ByToken("") != nil {
		t.Fatal("ByToken names the wrong tenant")
	}
}

// A tenants file others can read gives them every tenant's token; one
// others can write, every tenant. Both are refused, at start and on a
// reload (which keeps the tenants it had), as is a symlink to the file.
func TestAttackLooseTenantsFile(t *testing.T) {
	dir := t.TempDir()
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o620, 0o602} {
		p := writeFile(t, dir, fmt.Sprintf("t%o.toml", mode), []byte(testTenants), mode)
		if _, err := LoadTenants(p); err == nil || !strings.Contains(err.Error(), "chmod 600") {
			t.Errorf("mode %04o: %v, want refused", mode, err)
		}
	}
	good := writeFile(t, dir, "good.toml", []byte(testTenants), 0o600)
	if _, err := LoadTenants(good); err != nil {
		t.Fatalf("a 0600 file: %v", err)
	}
	link := filepath.Join(dir, "link.toml")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTenants(link); err == nil {
		t.Error("a symlink to the tenants file was followed")
	}

	tg := startGateway(t, nil)
	c := tg.client(t, nil)
	if err := os.Chmod(tg.g.cfg.TenantsFile, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := tg.g.Reload(); err == nil {
		t.Fatal("a reload took a tenants file others can read")
	}
	if code, _ := tg.do(t, c, "GET", "/v1/sessions", tokenAlice, "", nil); code != 200 {
		t.Fatalf("after a refused reload alice's token: %d, want the old tenants kept", code)
	}
}

// There is no plain-HTTP gateway: New refuses to make one without a
// certificate and key, and the listener Serve is given speaks TLS only,
// so a plain request on it never reaches the backend.
func TestAttackPlainHTTPListener(t *testing.T) {
	for _, tc := range []struct{ name, cert, key string }{{"neither", "", ""}, {"no key", "x.crt", ""}, {"no cert", "", "x.key"}} {
		cfg := Defaults()
		cfg.CertFile, cfg.KeyFile, cfg.TenantsFile = tc.cert, tc.key, "/nonexistent"
		if _, err := New(cfg, &fakeBackend{}); err == nil || !strings.Contains(err.Error(), "HTTPS only") {
			t.Errorf("%s: New said %v, want a refusal naming HTTPS only", tc.name, err)
		}
	}
	tg := startGateway(t, nil)
	conn, err := net.DialTimeout("tcp", tg.addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(conn, "POST /v1/run HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 2\r\n\r\n{}", tokenAlice)
	// Go's TLS server answers a plain request with a fixed 400 (it saw
	// "POST" where a ClientHello belongs); nothing of the gateway ran.
	line, _ := bufio.NewReader(conn).ReadString('\n')
	if !strings.HasPrefix(line, "HTTP/1.0 400 ") {
		t.Fatalf("a plain HTTP request was answered %q, want the TLS listener's HTTP/1.0 400", line)
	}
	if n := tg.backend.callCount(); n != 0 {
		t.Fatalf("a plain HTTP request reached the backend (%d calls)", n)
	}
	// And the handler itself, mounted on a plain server by mistake,
	// serves nothing.
	rec := &recordingWriter{header: map[string][]string{}}
	req := mustRequest(t, "POST", "/v1/run", tokenAlice)
	tg.g.ServeHTTP(rec, req)
	if rec.code != 403 || tg.backend.callCount() != 0 {
		t.Fatalf("the handler without TLS answered %d, backend calls %d", rec.code, tg.backend.callCount())
	}
}

// A client certificate from a CA the gateway does not trust ends the
// handshake, whatever its name; one from the trusted CA names its tenant.
func TestAttackClientCertOtherCA(t *testing.T) {
	tg := startGateway(t, nil)
	other := certtest.NewCA(t, "someone else's CA")
	certPEM, keyPEM := issue(t, other, "alice.clients.test", true)
	bad, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	// Go's client would keep a certificate the server's CA list does not
	// name to itself: this one sends it anyway, as an attacker's would.
	forced := tg.client(t, nil)
	forced.Transport.(*http.Transport).TLSClientConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		return &bad, nil
	}
	req := mustRequest(t, "GET", "https://"+tg.addr+"/v1/sessions", "")
	if resp, err := forced.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("a certificate of another CA was answered %d", resp.StatusCode)
	}
	certPEM, keyPEM = issue(t, tg.ca, "alice.clients.test", true)
	good, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := tg.do(t, tg.client(t, &good), "GET", "/v1/sessions", "", "", nil); code != 200 {
		t.Fatalf("alice's certificate: %d %s", code, body)
	}
	if got := tg.backend.last(); got.tenant != "alice" {
		t.Fatalf("a certificate for alice came through as tenant %q", got.tenant)
	}
	// A SAN names the tenant as well as a CN does.
	certPEM, keyPEM = issue(t, tg.ca, "workload-7", true, "alice.clients.test")
	bySAN, _ := tls.X509KeyPair(certPEM, keyPEM)
	if code, body := tg.do(t, tg.client(t, &bySAN), "GET", "/v1/sessions", "", "", nil); code != 200 || tg.backend.last().tenant != "alice" {
		t.Fatalf("alice's name in a SAN: %d %s, tenant %q", code, body, tg.backend.last().tenant)
	}
	// A certificate of the trusted CA for a name no tenant has: 401.
	certPEM, keyPEM = issue(t, tg.ca, "mallory.clients.test", true)
	nobody, _ := tls.X509KeyPair(certPEM, keyPEM)
	if code, _ := tg.do(t, tg.client(t, &nobody), "GET", "/v1/sessions", "", "", nil); code != 401 {
		t.Fatalf("a certificate naming no tenant: %d, want 401", code)
	}
}

// A body over --max-body is refused before a byte of it is forwarded:
// by its Content-Length, or, sent chunked, once it passes the bound.
func TestAttackOversizeBody(t *testing.T) {
	// The body's deadline is far past the test's: an answer in time is
	// one that did not wait for the body.
	tg := startGateway(t, func(c *Config) { c.MaxBody, c.BodyTimeout = 1<<20, time.Hour })
	c := tg.client(t, nil)
	big := `{"code":"` + strings.Repeat("x", 1<<20) + `"}`
	if code, body := tg.do(t, c, "POST", "/v1/run", tokenAlice, big, nil); code != 413 {
		t.Fatalf("a body of %d bytes: %d %s, want 413", len(big), code, body)
	}
	// Chunked: no Content-Length to refuse it by.
	req := mustRequest(t, "POST", "https://"+tg.addr+"/v1/run", tokenAlice)
	req.Body = nopCloser{strings.NewReader(big)}
	req.ContentLength = -1
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 413 {
		t.Fatalf("a chunked body of %d bytes: %d, want 413", len(big), resp.StatusCode)
	}
	if n := tg.backend.callCount(); n != 0 {
		t.Fatalf("%d oversize bodies reached the backend", n)
	}
	// Refused by its Content-Length alone: the 413 comes though the body
	// is never sent (a gateway that read first would wait for it).
	head := fmt.Sprintf("POST /v1/run HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n", tokenAlice, (1<<20)+1)
	if line := tg.raw(t, head); !strings.Contains(line, " 413 ") {
		t.Fatalf("a Content-Length over --max-body, its body not sent: %q, want 413 at once", line)
	}
	ok := `{"code":"` + strings.Repeat("x", 1000) + `"}`
	if code, _ := tg.do(t, c, "POST", "/v1/run", tokenAlice, ok, nil); code != 200 || string(tg.backend.last().body) != ok {
		t.Fatalf("a small body: %d, forwarded %d bytes", code, len(tg.backend.last().body))
	}
}

// An Idempotency-Key of 10 MB never reaches a handler (the head's bound),
// one of a kilobyte or with a control byte is refused, and a good one
// reaches the backend as it came.
func TestAttackIdempotencyKey(t *testing.T) {
	tg := startGateway(t, nil)
	c := tg.client(t, nil)
	req := mustRequest(t, "POST", "https://"+tg.addr+"/v1/run", tokenAlice)
	req.Header.Set("Idempotency-Key", strings.Repeat("k", 10<<20))
	if resp, err := c.Do(req); err == nil {
		resp.Body.Close()
		if resp.StatusCode != 431 {
			t.Fatalf("a 10 MB Idempotency-Key: %d, want 431", resp.StatusCode)
		}
	}
	for _, key := range []string{strings.Repeat("k", 1024), strings.Repeat("k", MaxIdempotencyKey+1), "a\x01b", "a b", "caf\xc3\xa9"} {
		// Written by hand: Go's client refuses to send a control byte.
		if line := tg.raw(t, "POST /v1/run HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+tokenAlice+"\r\nIdempotency-Key: "+key+"\r\nContent-Length: 10\r\n\r\n{\"code\":1}"); !strings.Contains(line, " 400 ") {
			t.Errorf("Idempotency-Key of %d bytes %.20q: %q, want 400", len(key), key, line)
		}
	}
	if n := tg.backend.callCount(); n != 0 {
		t.Fatalf("%d requests with a bad Idempotency-Key reached the backend", n)
	}
	key := "7f3c9a2e-5b1d-4e8f-9a6c-2d4b8e1f0a3c"
	if code, _ := tg.do(t, c, "POST", "/v1/run", tokenAlice, `{"code":"1"}`, map[string]string{"Idempotency-Key": key}); code != 200 {
		t.Fatalf("a good key: %d", code)
	}
	if got := tg.backend.last().key; got != key {
		t.Fatalf("the backend got key %q, want %q", got, key)
	}
}

// TLS below 1.2 is refused in the handshake.
func TestAttackOldTLSRefused(t *testing.T) {
	tg := startGateway(t, nil)
	c := tg.client(t, nil)
	tc := c.Transport.(*http.Transport).TLSClientConfig
	tc.MinVersion, tc.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
	req := mustRequest(t, "GET", "https://"+tg.addr+"/v1/health", "")
	if resp, err := c.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("TLS 1.1 was answered %d", resp.StatusCode)
	}
	tc.MaxVersion = tls.VersionTLS13
	if resp, err := c.Do(mustRequest(t, "GET", "https://"+tg.addr+"/v1/health", "")); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
		if resp.TLS.Version != tls.VersionTLS13 {
			t.Fatalf("negotiated %x, want TLS 1.3 when the client has it", resp.TLS.Version)
		}
	}
}

// A body that stalls is cut off at --body-timeout (408) and never
// forwarded: a slow caller holds a gateway's connection, not a node's.
func TestAttackSlowBody(t *testing.T) {
	tg := startGateway(t, func(c *Config) { c.BodyTimeout = 300 * time.Millisecond })
	line := tg.raw(t, "POST /v1/run HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+tokenAlice+"\r\nContent-Length: 100\r\n\r\n{\"code\"")
	if !strings.Contains(line, " 408 ") {
		t.Fatalf("a body that stopped after 7 of 100 bytes: %q, want 408", line)
	}
	if n := tg.backend.callCount(); n != 0 {
		t.Fatalf("a stalled body reached the backend (%d calls)", n)
	}
}

// A caller without a token that announces a body and never sends it is
// answered 401 at once, its connection ended: net/http would otherwise
// wait, without a deadline, to read the body it never sends, and
// anyone could hold the gateway's connections that way.
func TestAttackUnauthenticatedStalledBody(t *testing.T) {
	tg := startGateway(t, nil)
	for _, tc := range []struct{ name, head, want string }{
		{"no token", "POST /v1/run HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n", " 401 "},
		{"bad key", "POST /v1/run HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + tokenAlice + "\r\nIdempotency-Key: a b\r\nContent-Length: 100\r\n\r\n", " 400 "},
		{"health", "GET /v1/health HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n", " 200 "},
		{"metrics", "GET /v1/metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + tokenAlice + "\r\nContent-Length: 100\r\n\r\n", " 403 "},
		{"no route", "POST /nowhere HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + tokenAlice + "\r\nContent-Length: 100\r\n\r\n", " 404 "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if line := tg.raw(t, tc.head); !strings.Contains(line, tc.want) {
				t.Fatalf("%q, want %s at once", line, tc.want)
			}
		})
	}
}
