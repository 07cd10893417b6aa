package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// underQuota holds a tenant to its max_sessions before a new session is
// asked for: the backend lists the tenant's sessions across the cluster
// (GET /v1/sessions as the tenant), and a tenant holding its quota gets
// 429. Two gateways may each admit one at the same moment: the quota is
// an operator's bound on a tenant, and each node's own
// --sessions-per-caller (the tenant counting as one caller) is the hard
// one. It answers and returns false when the request goes no further.
func (g *Gateway) underQuota(w http.ResponseWriter, r *http.Request, t *Tenant) bool {
	if t.MaxSessions <= 0 {
		return true
	}
	list, err := http.NewRequestWithContext(r.Context(), http.MethodGet, "/v1/sessions", nil)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return false
	}
	list.TLS, list.RemoteAddr, list.Body = r.TLS, r.RemoteAddr, http.NoBody
	rec := &bufferWriter{header: http.Header{}, max: 16 << 20}
	g.backend.Serve(rec, list, t.Name, "")
	var answer struct {
		Sessions []json.RawMessage `json:"sessions"`
	}
	if rec.status() != http.StatusOK || rec.overflow || json.Unmarshal(rec.body.Bytes(), &answer) != nil {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("cannot count tenant %s's sessions for its quota (the backend answered %d)", t.Name, rec.status()))
		return false
	}
	if n := len(answer.Sessions); n >= t.MaxSessions {
		g.counts.policyRefused.Add(1)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, fmt.Sprintf("tenant %s holds %d sessions, its max_sessions; end one first", t.Name, n))
		return false
	}
	return true
}

// bufferWriter is an answer kept in memory: the backend's to a question
// the gateway asks on its own.
type bufferWriter struct {
	header   http.Header
	code     int
	body     bytes.Buffer
	max      int  // bytes kept at most
	overflow bool // more came
}

func (b *bufferWriter) Header() http.Header { return b.header }
func (b *bufferWriter) Write(p []byte) (int, error) {
	if b.code == 0 {
		b.code = http.StatusOK
	}
	if b.body.Len()+len(p) > b.max {
		b.overflow = true
		return 0, fmt.Errorf("an answer over %d bytes", b.max)
	}
	return b.body.Write(p)
}
func (b *bufferWriter) WriteHeader(code int) {
	if b.code == 0 {
		b.code = code
	}
}
func (b *bufferWriter) SetWriteDeadline(time.Time) error { return nil }

func (b *bufferWriter) status() int {
	if b.code == 0 {
		return http.StatusOK
	}
	return b.code
}
