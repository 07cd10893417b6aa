package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"

	"github.com/stockade/stockade/internal/httpbuf"
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
	rec := httpbuf.New(16 << 20)
	g.backend.Serve(rec, list, t.Name, "")
	var answer struct {
		Sessions []json.RawMessage `json:"sessions"`
	}
	if rec.Status() != http.StatusOK || rec.Over() || json.Unmarshal(rec.Body(), &answer) != nil {
		release()
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("cannot count tenant %s's sessions for its quota (the backend answered %d)", t.Name, rec.Status()))
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
