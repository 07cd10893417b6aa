package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// underQuota holds a tenant to its max_sessions before a new session is
// asked for: the backend lists the tenant's sessions across the cluster
// (GET /v1/sessions as the tenant), the session requests this gateway is
// forwarding for the tenant now are added (a session takes a jail's
// start to appear in the list: a burst of requests each counted before
// any existed), and a tenant at its quota gets 429. Two gateways may each
// admit one at the same moment: the quota is an operator's bound on a
// tenant, and each node's own --sessions-per-caller (the tenant counting
// as one caller) is the hard one. It answers and returns false when the
// request goes no further; else release is called once the session
// request was answered.
func (g *Gateway) underQuota(w http.ResponseWriter, r *http.Request, t *Tenant) (release func(), ok bool) {
	if t.MaxSessions <= 0 {
		return func() {}, true
	}
	others := g.pending.add(t.Name, 1) - 1
	release = func() { g.pending.add(t.Name, -1) }
	list, err := http.NewRequestWithContext(r.Context(), http.MethodGet, "/v1/sessions", nil)
	if err != nil {
		release()
		writeError(w, http.StatusInternalServerError, err.Error())
		return nil, false
	}
	list.TLS, list.RemoteAddr, list.Body = r.TLS, r.RemoteAddr, http.NoBody
	rec := &bufferWriter{header: http.Header{}, max: 16 << 20}
	g.backend.Serve(rec, list, t.Name, "")
	var answer struct {
		Sessions []json.RawMessage `json:"sessions"`
	}
	if rec.status() != http.StatusOK || rec.overflow || json.Unmarshal(rec.body.Bytes(), &answer) != nil {
		release()
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("cannot count tenant %s's sessions for its quota (the backend answered %d)", t.Name, rec.status()))
		return nil, false
	}
	if n := len(answer.Sessions) + others; n >= t.MaxSessions {
		release()
		g.counts.policyRefused.Add(1)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, fmt.Sprintf("tenant %s holds %d sessions (or is making them), its max_sessions; end one first", t.Name, n))
		return nil, false
	}
	return release, true
}

// pendingSessions counts, by tenant, the requests of a kind in the
// gateway now.
type pendingSessions struct {
	mu sync.Mutex
	n  map[string]int
}

// add adds d to tenant's count and returns the new count.
func (p *pendingSessions) add(tenant string, d int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == nil {
		p.n = map[string]int{}
	}
	p.n[tenant] += d
	n := p.n[tenant]
	if n == 0 {
		delete(p.n, tenant)
	}
	return n
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
