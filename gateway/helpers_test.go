package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/certtest"
	"github.com/stockade/stockade/internal/proctest"
)

// issue makes a leaf certificate: a server's for 127.0.0.1 and
// localhost, or a client's with cn.
func issue(t *testing.T, ca *certtest.CA, cn string, client bool, sans ...string) (certPEM, keyPEM []byte) {
	t.Helper()
	tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: cn}}
	if client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		tmpl.DNSNames = sans
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	l := ca.Issue(t, tmpl)
	return l.CertPEM, l.KeyPEM
}

func writeFile(t *testing.T, dir, name string, b []byte, mode os.FileMode) string {
	t.Helper()
	return certtest.WriteFile(t, dir, name, b, mode)
}

// Tokens of the tenants the tests use.
var (
	tokenAlice = strings.Repeat("a1", 20)
	tokenBob   = strings.Repeat("b2", 20)
	tokenOps   = strings.Repeat("c3", 20)
)

var testTenants = `
[tenant.alice]
tokens = ["` + tokenAlice + `"]
cert_names = ["alice.clients.test"]

[tenant.bob]
tokens = ["` + tokenBob + `"]
profiles = ["python", "data"]
max_sessions = 2
max_runs = 2
[tenant.bob.limits]
memory = "256M"
timeout = "10s"

[tenant.ops]
tokens = ["` + tokenOps + `"]
metrics = true
`

// fakeBackend is the cluster as the gateway sees it: sessions owned by
// tenants, and a record of what reached it.
type fakeBackend struct {
	mu       sync.Mutex
	sessions map[string]string // id -> tenant
	calls    []fakeCall
	next     int
	// createDelay is how long a session takes to start, as a node's
	// jail does (0: at once).
	createDelay time.Duration
	arrived     atomic.Int64 // session creations that reached Serve
	// runGate, when set, holds each run until it is closed, as a
	// cluster's queue does; runsArrived counts the runs that reached Serve.
	runGate     chan struct{}
	runsArrived atomic.Int64
}

type fakeCall struct {
	method, path, tenant, key string
	body                      []byte
}

func (f *fakeBackend) Serve(w http.ResponseWriter, r *http.Request, tenant, key string) {
	body, _ := io.ReadAll(r.Body)
	if r.Method == "POST" && r.URL.Path == "/v1/sessions" {
		f.arrived.Add(1)
		f.mu.Lock()
		d := f.createDelay
		f.mu.Unlock()
		time.Sleep(d)
	}
	if r.Method == "POST" && r.URL.Path == "/v1/run" {
		f.runsArrived.Add(1)
		f.mu.Lock()
		gate := f.runGate
		f.mu.Unlock()
		if gate != nil {
			select {
			case <-gate:
			case <-r.Context().Done():
			}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sessions == nil {
		f.sessions = map[string]string{}
	}
	f.calls = append(f.calls, fakeCall{r.Method, r.URL.Path, tenant, key, body})
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == "GET" && r.URL.Path == "/v1/sessions":
		list := []map[string]string{}
		for id, owner := range f.sessions {
			if owner == tenant {
				list = append(list, map[string]string{"session_id": id})
			}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"sessions": list})
	case r.Method == "POST" && r.URL.Path == "/v1/sessions":
		f.next++
		id := fmt.Sprintf("s%d", f.next)
		f.sessions[id] = tenant
		w.WriteHeader(201)
		_ = json.NewEncoder(w).Encode(map[string]string{"session_id": id})
	case strings.HasPrefix(r.URL.Path, "/v1/sessions/"):
		id, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/v1/sessions/"), "/")
		if f.sessions[id] != tenant {
			w.WriteHeader(404)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": fmt.Sprintf("no session %q", id)})
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"verdict": "ok", "stdout": "2\n"})
	default:
		_ = json.NewEncoder(w).Encode(map[string]any{"verdict": "ok", "tenant": tenant})
	}
}

func (f *fakeBackend) Metrics(w io.Writer) {
	fmt.Fprintln(w, "stockade_cluster_fake 1")
}

// calls0 counts the session requests that reached the backend,
// including those still starting (createDelay).
func (f *fakeBackend) calls0() int {
	return int(f.arrived.Load())
}

func (f *fakeBackend) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

func (f *fakeBackend) last() fakeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[len(f.calls)-1]
}

// testGateway is a gateway serving HTTPS on loopback with a fake backend.
type testGateway struct {
	g       *Gateway
	backend *fakeBackend
	addr    string
	ca      *certtest.CA // the server's and the clients' CA
	dir     string
	audit   *proctest.Buffer
}

func startGateway(t *testing.T, adjust func(*Config)) *testGateway {
	t.Helper()
	dir := t.TempDir()
	ca := certtest.NewCA(t, "stockade test CA")
	cert, key := issue(t, ca, "gateway", false)
	cfg := Defaults()
	cfg.CertFile = writeFile(t, dir, "gw.crt", cert, 0o644)
	cfg.KeyFile = writeFile(t, dir, "gw.key", key, 0o600)
	cfg.ClientCAFile = writeFile(t, dir, "clients-ca.crt", ca.PEM, 0o644)
	cfg.TenantsFile = writeFile(t, dir, "tenants.toml", []byte(testTenants), 0o600)
	audit := &proctest.Buffer{}
	cfg.Audit = audit
	if adjust != nil {
		adjust(&cfg)
	}
	fb := &fakeBackend{}
	g, err := New(cfg, fb)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = g.Serve(ctx, l, time.Second)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return &testGateway{g: g, backend: fb, addr: l.Addr().String(), ca: ca, dir: dir, audit: audit}
}

// client is an HTTPS client that trusts the test CA, with an optional
// client certificate.
func (tg *testGateway) client(t *testing.T, cert *tls.Certificate) *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(tg.ca.Cert)
	tc := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 20 * time.Second}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// do sends one request with token (none if ""), returns status and body.
func (tg *testGateway) do(t *testing.T, c *http.Client, method, path, token, body string, hdr map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "https://"+tg.addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// raw sends one request as written over TLS and returns the status line.
func (tg *testGateway) raw(t *testing.T, request string) string {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(tg.ca.Cert)
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", tg.addr, &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(conn, request); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(conn).ReadString('\n')
	return line
}
