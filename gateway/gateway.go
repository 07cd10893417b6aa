package gateway

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/stockade/stockade/mcp"
)

// Config is what `stockade gateway` is given.
type Config struct {
	TenantsFile  string // --tenants: tokens, certificate names and policies
	CertFile     string // --cert: the gateway's certificate (PEM, chain)
	KeyFile      string // --key
	ClientCAFile string // --client-ca: verify client certificates (mutual TLS)
	MaxBody      int64  // --max-body: the largest request body forwarded
	// BodyTimeout is how long a body may take to arrive (408 after).
	BodyTimeout time.Duration
	// PerTenant bounds the requests one tenant has in this gateway at
	// once (429 past it, before its body is read): each may hold
	// MaxBody in memory, so a tenant holds at most PerTenant × MaxBody.
	PerTenant int
	// Audit gets one JSON line per request, naming the tenant.
	Audit io.Writer
	// Logf is the gateway's own log (stderr): an audit log that stops
	// taking lines, and takes them again, is said there. Nil: nowhere.
	Logf func(format string, a ...any)
	// Version is stockade's, in MCP's server information.
	Version string
}

// Defaults are the server's own: the same body bound and deadline as
// `stockade serve`, so that a body the gateway forwards is one a node
// takes.
func Defaults() Config {
	return Config{MaxBody: 16 << 20, BodyTimeout: 30 * time.Second, PerTenant: 256}
}

// MaxIdempotencyKey is the longest Idempotency-Key taken, in bytes: a
// UUID is 36, a ULID 26; the key is stored beside every run it names.
const MaxIdempotencyKey = 255

// maxHeaderBytes bounds a request's head: a header of megabytes is
// refused (431) by the HTTP server before any handler sees it.
const maxHeaderBytes = 64 << 10

// Gateway is one `stockade gateway`: an http.Handler and its TLS.
type Gateway struct {
	cfg     Config
	backend Backend
	tls     *tls.Config                // Serve's: each handshake takes tlsNow
	tlsNow  atomic.Pointer[tls.Config] // the certificate, key and client CAs last loaded
	tenants atomic.Pointer[Tenants]
	audit   *slog.Logger
	auditW  *auditWriter // what audit writes to: its lost lines
	counts  counters
	mcp     http.Handler // POST /v1/mcp
	pending pendingSessions
	held    pendingSessions // requests in this gateway, by tenant
	runs    pendingSessions // runs in this gateway, by tenant (max_runs)
	mu      sync.Mutex      // reloads
}

// New checks cfg, loads the tenants file and the certificates, and
// returns a gateway ready to serve. It fails without a certificate and
// key: there is no plain-HTTP gateway.
func New(cfg Config, backend Backend) (*Gateway, error) {
	d := Defaults()
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = d.MaxBody
	}
	if cfg.BodyTimeout <= 0 {
		cfg.BodyTimeout = d.BodyTimeout
	}
	if cfg.PerTenant <= 0 {
		cfg.PerTenant = d.PerTenant
	}
	if cfg.Audit == nil {
		cfg.Audit = io.Discard
	}
	if backend == nil {
		return nil, errors.New("gateway: no backend")
	}
	tc, err := tlsConfig(cfg.CertFile, cfg.KeyFile, cfg.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	if cfg.TenantsFile == "" {
		return nil, errors.New("gateway: --tenants is required (who may call, and what each tenant may do)")
	}
	ts, err := LoadTenants(cfg.TenantsFile)
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	g := &Gateway{cfg: cfg, backend: backend, auditW: &auditWriter{w: cfg.Audit, logf: cfg.Logf}}
	g.audit = slog.New(slog.NewJSONHandler(g.auditW, nil))
	g.tenants.Store(ts)
	g.tlsNow.Store(tc)
	// The listener's config hands each handshake the certificate and
	// client CAs of now: a reload takes for the next connection, with no
	// restart and no connection dropped.
	g.tls = &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: tc.NextProtos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return g.tlsNow.Load(), nil }}
	g.mcp = g.mcpHandler()
	return g, nil
}

// Reload reads the tenants file, the certificate, its key and the client
// CAs again (on SIGHUP), all or none: a file that fails its checks leaves
// every one of them as it was, and says why. A renewed certificate takes
// for the connections to come; those open keep theirs.
func (g *Gateway) Reload() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	ts, err := LoadTenants(g.cfg.TenantsFile)
	var tc *tls.Config
	if err == nil {
		tc, err = tlsConfig(g.cfg.CertFile, g.cfg.KeyFile, g.cfg.ClientCAFile)
	}
	if err != nil {
		g.counts.reloadFailed.Add(1)
		return fmt.Errorf("gateway: reload: %w (the tenants and certificates loaded before stay)", err)
	}
	g.tenants.Store(ts)
	g.tlsNow.Store(tc)
	g.counts.reloads.Add(1)
	return nil
}

// Serve serves HTTPS on l until ctx ends, then shuts down, letting
// requests in flight finish within grace. l is wrapped in TLS here: no
// path of the gateway serves a plain connection.
func (g *Gateway) Serve(ctx context.Context, l net.Listener, grace time.Duration) error {
	srv := &http.Server{
		Handler:           g,
		TLSConfig:         g.tls,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(slog.NewTextHandler(io.Discard, nil), slog.LevelError),
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(tls.NewListener(l, g.tls)) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := srv.Shutdown(sctx)
	<-done
	return err
}

// ServeHTTP is one request: authenticate, bound, apply the tenant's
// policy, audit, forward.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &recorder{ResponseWriter: w}
	g.counts.requests.Add(1)
	t, how := g.authenticate(r)
	defer func() {
		g.counts.byStatus(rec.status())
		name := ""
		if t != nil {
			name = t.Name
		}
		// Never the token, the body or the query (a files path may be
		// the tenant's data): who, what route, how it ended.
		g.audit.Info("request", "tenant", name, "auth", how, "method", r.Method, "route", routeOf(r.URL.Path),
			"status", rec.status(), "bytes_in", r.ContentLength, "ms", time.Since(start).Milliseconds(), "remote", r.RemoteAddr)
	}()
	if r.TLS == nil {
		// Unreachable through Serve; a handler mounted elsewhere must
		// not serve tokens in the clear either.
		reject(rec, http.StatusForbidden, "HTTPS only")
		return
	}
	if r.URL.Path == "/v1/health" {
		ignoreBody(rec, r)
		g.health(rec, r)
		return
	}
	if t == nil {
		g.counts.unauthorized.Add(1)
		rec.Header().Set("WWW-Authenticate", `Bearer realm="stockade"`)
		reject(rec, http.StatusUnauthorized, "a valid bearer token or client certificate is required")
		return
	}
	if n := g.held.add(t.Name, 1); n > g.cfg.PerTenant {
		g.held.add(t.Name, -1)
		rec.Header().Set("Retry-After", "1")
		reject(rec, http.StatusTooManyRequests, fmt.Sprintf("tenant %s has %d requests in this gateway already (--per-tenant)", t.Name, g.cfg.PerTenant))
		return
	}
	defer g.held.add(t.Name, -1)
	if r.URL.Path == "/v1/metrics" {
		ignoreBody(rec, r)
		g.metrics(rec, r, t)
		return
	}
	if !strings.HasPrefix(r.URL.Path, "/v1/") {
		reject(rec, http.StatusNotFound, fmt.Sprintf("no route %s (the API is under /v1/)", r.URL.Path))
		return
	}
	key, err := idempotencyKey(r)
	if err != nil {
		reject(rec, http.StatusBadRequest, err.Error())
		return
	}
	if !g.bound(rec, r, t) {
		return
	}
	if r.URL.Path == "/v1/mcp" {
		// One request, one call (mcp.IsBatch): a batch's calls would all
		// run at once, past the tenant's session quota, each answer held.
		body, _ := io.ReadAll(r.Body) // in memory already: bound read it
		if mcp.IsBatch(body) {
			writeError(rec, http.StatusBadRequest, "a JSON-RPC batch: send one message a request")
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		g.mcp.ServeHTTP(rec, withTenant(r, t))
		return
	}
	g.forward(rec, r, t, key)
}

// forward hands an admitted request to the backend as tenant t, holding
// the tenant to its session quota first.
func (g *Gateway) forward(w http.ResponseWriter, r *http.Request, t *Tenant, key string) {
	if r.Method == http.MethodPost && r.URL.Path == "/v1/sessions" {
		release, ok := g.underQuota(w, r, t)
		if !ok {
			return
		}
		defer release()
	}
	if r.Method == http.MethodPost && r.URL.Path == "/v1/run" {
		if n := g.runs.add(t.Name, 1); n > t.MaxRuns {
			g.runs.add(t.Name, -1)
			g.counts.policyRefused.Add(1)
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("tenant %s has %d runs waiting in this gateway already, its max_runs; retry once one is answered", t.Name, t.MaxRuns))
			return
		}
		defer g.runs.add(t.Name, -1)
	}
	g.counts.forwarded.Add(1)
	g.backend.Serve(w, r, t.Name, key)
}

// reject answers a request whose body was not read, and ends its
// connection: net/http would otherwise read the rest of a small body
// before the answer, with no deadline, for a caller that may never send
// it (and a caller without a token could hold connections that way).
// Connection: close spares that read; a read deadline in the past makes
// any read that happens anyway fail at once.
func reject(w http.ResponseWriter, status int, msg string) {
	_ = http.NewResponseController(w).SetReadDeadline(time.Unix(1, 0))
	w.Header().Set("Connection", "close")
	writeError(w, status, msg)
}

// ignoreBody is reject's first half for a route that answers without a
// body: one that came anyway is not read, and ends the connection.
func ignoreBody(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength != 0 {
		_ = http.NewResponseController(w).SetReadDeadline(time.Unix(1, 0))
		w.Header().Set("Connection", "close")
	}
}

// authenticate names the caller's tenant: by a verified client
// certificate, else by its bearer token; nil when neither names one.
func (g *Gateway) authenticate(r *http.Request) (*Tenant, string) {
	ts := g.tenants.Load()
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		for _, name := range certNames(r.TLS.VerifiedChains[0]) {
			if t := ts.ByCertName(name); t != nil {
				return t, "cert"
			}
		}
	}
	tok, ok := bearer(r.Header.Get("Authorization"))
	if !ok {
		return nil, "none"
	}
	if t := ts.ByToken(tok); t != nil {
		return t, "token"
	}
	return nil, "bad-token"
}

// bearer is the token of an "Authorization: Bearer TOKEN" header.
func bearer(h string) (string, bool) {
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" || len(tok) > maxToken {
		return "", false
	}
	return tok, true
}

// idempotencyKey is the request's Idempotency-Key, checked: at most
// MaxIdempotencyKey bytes of printable ASCII, given once.
func idempotencyKey(r *http.Request) (string, error) {
	vs := r.Header.Values("Idempotency-Key")
	switch {
	case len(vs) == 0:
		return "", nil
	case len(vs) > 1:
		return "", errors.New("Idempotency-Key given more than once")
	}
	k := vs[0]
	if k == "" || len(k) > MaxIdempotencyKey {
		return "", fmt.Errorf("Idempotency-Key: %d bytes; 1 to %d", len(k), MaxIdempotencyKey)
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return "", fmt.Errorf("Idempotency-Key: byte %d is not printable ASCII", i)
		}
	}
	return k, nil
}

// routeOf is the path with ids left in and file paths cut off: the
// route, for the audit line.
func routeOf(p string) string {
	if i := strings.Index(p, "/files/"); i >= 0 {
		return p[:i+len("/files/")] + "..."
	}
	if len(p) > 200 {
		return p[:200] + "..."
	}
	return p
}

// ReloadOnSIGHUP reloads on each SIGHUP until ctx ends, telling report
// how each went. The handler is installed before it returns: a SIGHUP
// after it is a reload, never the process's end.
func (g *Gateway) ReloadOnSIGHUP(ctx context.Context, report func(error)) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		g.ReloadOn(ctx, hup, report)
	}()
}

// ReloadOn reloads on each signal from hup until ctx ends (a caller that
// took SIGHUP before the gateway existed hands its channel here: a
// SIGHUP that came while the cluster was dialled is a reload once the
// gateway serves).
func (g *Gateway) ReloadOn(ctx context.Context, hup <-chan os.Signal, report func(error)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			report(g.Reload())
		}
	}
}
