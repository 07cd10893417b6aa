package server

import (
	"context"
	"fmt"
	"net/http"
	"sync"

	"github.com/stockade/stockade/api"
)

// The seam `stockade serve --cluster` uses (package cluster): a request
// that came over NATS from a gateway is served by this server's own
// handlers, in process, on behalf of a tenant instead of a peer uid. The
// gateway authenticated the tenant; only gateways may publish work or
// request a node's subjects (NATS permissions), which is why the tenant
// is taken as given here.

// tenantUIDBase is where the numbers of tenants start, above the uids
// useradd hands out: the uid the audit log writes for a tenant (beside its
// name). It makes no owner: a tenant's sessions and caps are its typed
// owner's (capacity.Owner with Tenant set), never a local uid's even of
// the same number, nor the reverse.
const tenantUIDBase = 1 << 31

// tenants numbers each tenant seen by this process, in order (the audit
// log's uid); sessions, --per-caller and --sessions-per-caller count a
// tenant as one caller, by its owner.
type tenants struct {
	mu  sync.Mutex
	ids map[string]uint32
}

func (t *tenants) uid(name string) uint32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ids == nil {
		t.ids = map[string]uint32{}
	}
	id, ok := t.ids[name]
	if !ok {
		id = uint32(tenantUIDBase + len(t.ids))
		t.ids[name] = id
	}
	return id
}

// ServeTenant answers one /v1 request (a run, or anything under
// /v1/sessions) for tenant, as the unix socket answers a caller; runID,
// when not empty, is the cluster's id of the run, written into its audit
// lines. r's context ends the request early (its caller gave up); the
// server's own grace ends it as it ends a socket's.
func (s *Server) ServeTenant(w http.ResponseWriter, r *http.Request, tenant, runID string) {
	if tenant == "" {
		s.writeError(w, &api.Error{Status: 403, Msg: "no tenant"})
		return
	}
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	stop := context.AfterFunc(s.runs, func() { cancel(context.Cause(s.runs)) })
	defer stop()
	uid := s.tenantIDs.uid(tenant)
	p := peer{uid: uid, gid: uid, tenant: tenant, clusterRun: runID}
	s.handler().ServeHTTP(w, r.WithContext(context.WithValue(ctx, ctxKey{}, p)))
}

// FreeSlots is how many more runs the server would start now without
// queueing them: what a cluster node may pull.
func (s *Server) FreeSlots() int {
	running, queued := s.gate.Counts()
	return max(0, s.cfg.Concurrency-running-queued)
}

// Slots is --concurrency.
func (s *Server) Slots() int { return s.cfg.Concurrency }

// PoolReady is the prepared jails waiting, summed over the profiles.
func (s *Server) PoolReady() int {
	n := 0
	for _, p := range s.pools {
		n += p.Snapshot().Ready
	}
	return n
}

// LiveSessions is how many sessions are alive (not yet ended): what a
// draining node waits for, up to --drain-sessions.
func (s *Server) LiveSessions() int {
	live, _ := s.sessions.counts()
	return live
}

// EndSessions ends every session now with verdict shutdown and why (a
// fenced or draining node): their owners' next request answers 410 with
// it, and their jails are released in the background.
func (s *Server) EndSessions(why string) int {
	all := s.sessions.all()
	for _, ss := range all {
		s.closeSession(ss, api.SessionShutdown, why, true)
	}
	if len(all) > 0 {
		s.logf("ended %d sessions: %s", len(all), why)
	}
	return len(all)
}

// Logf writes one line to the server's log, prefixed as its own are.
func (s *Server) Logf(format string, a ...any) { s.logf("%s", fmt.Sprintf(format, a...)) }
