package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
)

// counters are the gateway's own, for GET /v1/metrics.
type counters struct {
	requests, forwarded, unauthorized, tooLarge, policyRefused atomic.Int64
	reloads, reloadFailed                                      atomic.Int64
	status2xx, status4xx, status5xx                            atomic.Int64
}

func (c *counters) byStatus(code int) {
	switch {
	case code >= 500:
		c.status5xx.Add(1)
	case code >= 400:
		c.status4xx.Add(1)
	default:
		c.status2xx.Add(1)
	}
}

// metrics answers GET /v1/metrics: the gateway's counters, then the
// backend's lines. They count every tenant's requests: only a tenant
// the file marks metrics = true may read them.
func (g *Gateway) metrics(w http.ResponseWriter, r *http.Request, t *Tenant) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		writeError(w, http.StatusMethodNotAllowed, "GET /v1/metrics")
		return
	}
	if !t.Metrics {
		writeError(w, http.StatusForbidden, fmt.Sprintf("tenant %s may not read metrics (metrics = true in the tenants file)", t.Name))
		return
	}
	var b bytes.Buffer
	c := &g.counts
	for _, m := range []struct {
		name, help string
		v          int64
	}{
		{"stockade_gateway_requests_total", "requests received", c.requests.Load()},
		{"stockade_gateway_forwarded_total", "requests forwarded to the backend", c.forwarded.Load()},
		{"stockade_gateway_unauthorized_total", "requests without a valid token or certificate (401)", c.unauthorized.Load()},
		{"stockade_gateway_body_too_large_total", "bodies refused over --max-body (413)", c.tooLarge.Load()},
		{"stockade_gateway_policy_refused_total", "requests a tenant's policy refused", c.policyRefused.Load()},
		{"stockade_gateway_tenant_reloads_total", "tenants file reloads that took", c.reloads.Load()},
		{"stockade_gateway_tenant_reload_failures_total", "tenants file reloads refused", c.reloadFailed.Load()},
		{"stockade_gateway_audit_lost_lines_total", "audit lines that could not be written (a full disk)", g.auditW.lost.Load()},
	} {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s counter\n%s %d\n", m.name, m.help, m.name, m.name, m.v)
	}
	fmt.Fprintf(&b, "# HELP stockade_gateway_responses_total responses by status class\n# TYPE stockade_gateway_responses_total counter\n")
	fmt.Fprintf(&b, "stockade_gateway_responses_total{class=\"2xx\"} %d\n", c.status2xx.Load())
	fmt.Fprintf(&b, "stockade_gateway_responses_total{class=\"4xx\"} %d\n", c.status4xx.Load())
	fmt.Fprintf(&b, "stockade_gateway_responses_total{class=\"5xx\"} %d\n", c.status5xx.Load())
	fmt.Fprintf(&b, "# HELP stockade_gateway_tenants tenants in the tenants file\n# TYPE stockade_gateway_tenants gauge\nstockade_gateway_tenants %d\n", g.tenants.Load().Len())
	g.backend.Metrics(&b)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	_, _ = w.Write(b.Bytes())
}

// health answers GET /v1/health without authentication, for a load
// balancer's check: that this gateway serves, and nothing of the tenants.
func (g *Gateway) health(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		writeError(w, http.StatusMethodNotAllowed, "GET /v1/health")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "role": "gateway"})
}

// writeError answers as the server does: {"error": "..."}.
func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// recorder keeps the status the handler wrote, for the audit line, and
// passes the rest through (Flush for streamed answers, and the
// ResponseController's deadlines through Unwrap).
type recorder struct {
	http.ResponseWriter
	code int
}

func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *recorder) status() int {
	if r.code == 0 {
		return http.StatusOK
	}
	return r.code
}
