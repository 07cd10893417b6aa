package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/client"
	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/profiles"
	"github.com/stockade/stockade/server/internal/capacity"
	"github.com/stockade/stockade/vmtier"
)

// Sessions of a profile with isolation = "vm" (docs/isolation.md): each
// holds a guest of its own for its whole life, taken from the profile's
// warm pool of booted guests (--vm-pool) or booted for it. The guest's
// init runs the server's own session machinery (`stockade serve` in the
// guest, its jail the inner wall) and the host forwards the session's
// requests to it over the guest's channel.
//
// Everything the guest answers is hostile. The host keeps its own view
// of the session: its id (never the guest's), its owner, its ttl and
// idle clock, its guest. The host alone decides the session is over:
// DELETE, ttl, idle, shutdown, or the guest gone (its VMM exited, its
// channel failed, an answer past the bound), each ending the VMM with
// nothing left on the host.

// vmGuest is what the server needs of a guest (vmtier.Guest; the tests'
// fakes).
type vmGuest interface {
	http.RoundTripper
	Serve(vmtier.ServePlan) error
	Done() <-chan struct{}
	Err() error
	Close() error
	// Network is what the host's proxy decided for the guest so far
	// (vmtier.Guest.Network): nil without an allowlist.
	Network() []jail.NetworkDecision
}

// warmGuest is a booted guest in a pool, holding its share of the budget
// (vmtier.HostMemory: its VMM's, not only the profile's memory).
type warmGuest struct {
	vmGuest
	mem, pids int64
	// made is the session the guest's server made while the guest waited
	// in the pool ("": none), with the profile's own limits: a create that
	// asks for no other limits and no environment takes it.
	made string
}

func (w *warmGuest) Close(b *capacity.Budget) error {
	err := w.vmGuest.Close()
	b.Give(w.mem, w.pids)
	return err
}

// vmStartEmulated is how long a guest's session interpreter may take to
// start under emulation.
const vmStartEmulated = 3 * time.Minute

// vmAnswerMax bounds what the host reads of one of the guest's answers:
// as much as the server itself would send for the session (its files
// bound, an exec's output twice over, JSON's escapes).
func (s *Server) vmAnswerMax(spec jail.Spec) int64 {
	return 2*s.cfg.FilesMax + 12*spec.OutputLimit + 1<<20
}

// vmCallsInFlight bounds the calls a vm session has in its guest at once:
// each holds on the host the guest's answer, up to vmAnswerMax and
// copied for the host's view, and the guest answers when it likes.
const vmCallsInFlight = 4

// vmSession is the host's view of a session in a guest.
type vmSession struct {
	id, profile string
	owner       capacity.Owner
	guest       *warmGuest
	guestID     string // the guest's server's id, used only on the channel
	spec        jail.Spec
	limits      api.SessionLimits
	created     time.Time
	idle        time.Duration
	pool        api.PoolUse
	calls       chan struct{} // a slot per call in the guest (vmCallsInFlight)
	execSlot    chan struct{} // the session's one exec at a time (its network's share)

	mu       sync.Mutex
	expires  time.Time
	lastUsed time.Time
	busy     int
	execs    int
	ended    bool
}

func (v *vmSession) touch(delta int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.lastUsed = time.Now()
	v.busy += delta
}

// vmTable is the VM sessions by id, and their tombstones.
type vmTable struct {
	mu    sync.Mutex
	byID  map[string]*vmSession
	tombs map[string]tombstone
	order []string
}

func newVMTable() *vmTable {
	return &vmTable{byID: map[string]*vmSession{}, tombs: map[string]tombstone{}}
}

// known reports whether id is a VM session's, live or ended (whoever
// owns it: the owner is checked on the route, with the answer an unknown
// id gets).
func (t *vmTable) known(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, live := t.byID[id]
	_, dead := t.tombs[id]
	return live || dead
}

func (t *vmTable) get(id string, owner capacity.Owner) (*vmSession, *tombstone) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if v, ok := t.byID[id]; ok && v.owner == owner {
		return v, nil
	}
	if tb, ok := t.tombs[id]; ok && tb.owner == owner {
		return nil, &tb
	}
	return nil, nil
}

// take removes v, leaving its tombstone; false if another took it first.
func (t *vmTable) take(v *vmSession, verdict api.Verdict, why string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byID[v.id] != v {
		return false
	}
	delete(t.byID, v.id)
	now := time.Now()
	for len(t.order) > 0 && (len(t.order) >= maxTombstones || now.Sub(t.tombs[t.order[0]].at) > tombstoneKeep) {
		delete(t.tombs, t.order[0])
		t.order = t.order[1:]
	}
	t.tombs[v.id] = tombstone{owner: v.owner, end: sessionEnd{Verdict: verdict, Why: why, At: now}, at: now}
	t.order = append(t.order, v.id)
	return true
}

func (t *vmTable) all() []*vmSession {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*vmSession, 0, len(t.byID))
	for _, v := range t.byID {
		out = append(out, v)
	}
	return out
}

// isVM reports whether profile name runs in the VM tier.
func (s *Server) isVM(name string) bool { return s.vmPools[name] != nil }

// newVMPool is profile name's pool of warm guests, sized by spec: each
// booted and its server started, so that a session's create waits for
// neither.
func (s *Server) newVMPool(name string, spec jail.Spec) *capacity.Pool[*warmGuest] {
	// The pool charges the budget with its spec's memory: a guest's is
	// its VMM's (the guest is still booted with spec).
	s.vmCharge[name] = vmtier.HostMemory(spec, s.cfg.VM)
	charged := spec
	charged.Cgroup.MemoryMax = s.vmCharge[name]
	return capacity.NewPool(name, charged, s.cfg.VMPool, s.budget, func(ctx context.Context) (*warmGuest, error) {
		return s.warmGuest(ctx, name, spec, true)
	}, s.logf, s.closeFailed)
}

// warmGuest boots a guest for profile name and starts its server, and
// with session, the session a create without limits or environment
// takes, so that such a create waits for no interpreter's start either.
// The caller has taken its share of the budget.
func (s *Server) warmGuest(ctx context.Context, name string, spec jail.Spec, session bool) (*warmGuest, error) {
	plan, err := s.guestProfile(name)
	if err != nil {
		return nil, fmt.Errorf("the guest's profile: %w", err)
	}
	g, err := s.vmBoot(ctx, spec)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*warmGuest, error) {
		if cerr := g.Close(); cerr != nil {
			s.closeFailed(cerr)
		}
		return nil, err
	}
	if err := g.Serve(plan); err != nil {
		return fail(err)
	}
	w := &warmGuest{vmGuest: g, mem: s.vmCharge[name], pids: spec.Cgroup.PidsMax}
	if session {
		cctx, cancel := context.WithTimeout(ctx, vmStartEmulated+time.Minute)
		made, err := client.Over(g, client.Options{MaxAnswer: s.vmAnswerMax(spec)}).CreateSession(cctx, &api.SessionRequest{})
		cancel()
		if err != nil {
			return fail(fmt.Errorf("the guest's session: %w", err))
		}
		if !guestIDOK(made.SessionID) {
			return fail(fmt.Errorf("the guest's session: it answered a session id %.80q", made.SessionID))
		}
		w.made = made.SessionID
	}
	return w, nil
}

// bootGuest is the server's vmBoot: a guest booted to its hello.
func (s *Server) bootGuest(ctx context.Context, spec jail.Spec) (vmGuest, error) {
	o := s.cfg.VM
	// The guest's answers are read no further than the server's bound:
	// a frame past it ends the guest before the host holds it.
	o.MaxAnswer = vmtier.AnswerFrame(s.vmAnswerMax(spec))
	if o.Notices == nil && s.cfg.Notices != nil {
		o.Notices = s.cfg.Notices
	}
	g, err := vmtier.Boot(ctx, spec, o)
	if err != nil {
		return nil, err
	}
	return g, nil
}

// takeGuest is a guest of profile name for one session or run: a warm
// one from the pool, else one booted now (its share of the budget
// taken). Its Close(s.budget) gives the share back.
func (s *Server) takeGuest(ctx context.Context, name string) (*warmGuest, api.PoolUse, *api.Error) {
	pl := s.vmPools[name]
	wg, use := usePool(pl)
	if wg != nil {
		return wg, use, nil
	}
	spec := s.sessionSpecs[name] // the pool's spec is charged its guests' VMMs' memory
	mem := s.vmCharge[name]
	if !s.budget.TryTake(mem, spec.Cgroup.PidsMax) {
		return nil, use, &api.Error{Status: 503, Msg: "busy: the memory or pids budget is spent (--budget-memory, --budget-pids)"}
	}
	wg, err := s.warmGuest(ctx, name, spec, false)
	if err != nil {
		s.budget.Give(mem, spec.Cgroup.PidsMax)
		return nil, use, &api.Error{Status: 500, Msg: "start a guest: " + err.Error()}
	}
	return wg, use, nil
}

// guestProfile is what the guest's server offers: the profile as this
// server serves it, in the jail tier (the guest's jail is the inner
// wall), and the --session-* flags this server lays over it.
func (s *Server) guestProfile(name string) (vmtier.ServePlan, error) {
	p := s.policies[name].Clone()
	if err := p.Set(profiles.FieldIsolation, profiles.IsolationJail, profiles.Origin{File: "the host's server"}); err != nil {
		return vmtier.ServePlan{}, err
	}
	// A prepared root reaches the guest as its second disk, mounted at
	// GuestRootfs: the guest's jails run in that.
	if p.Filesystem.Rootfs != profiles.RootfsHost {
		if err := p.Set(profiles.FieldRootfs, vmtier.GuestRootfs, profiles.Origin{File: "the host's server"}); err != nil {
			return vmtier.ServePlan{}, err
		}
	}
	toml, err := p.TOML()
	if err != nil {
		return vmtier.ServePlan{}, err
	}
	plan := vmtier.ServePlan{Profile: toml}
	sp := s.sessionPolicies[name]
	for _, f := range profiles.Flags() {
		if contains(SessionFields(), f.Field) && sp.IsSet(f.Field) {
			plan.Args = append(plan.Args, "--session-"+f.Name, sp.Text(f.Field))
		}
	}
	// The host holds the session's ttl and idle clock; the guest's own
	// are only a backstop past them.
	life := (s.cfg.SessionMaxLife + time.Hour).String()
	plan.Args = append(plan.Args, "--session-ttl", life, "--session-idle", life, "--session-max-life", life)
	if vmtier.KVM() != nil {
		// Emulated, the guest's Python starts ten times slower than the
		// host's: the interpreter's start gets what a boot gets.
		plan.Args = append(plan.Args, "--session-start-timeout", vmStartEmulated.String())
	}
	return plan, nil
}

func contains(fs []profiles.Field, f profiles.Field) bool {
	for _, x := range fs {
		if x == f {
			return true
		}
	}
	return false
}

// createVMSession makes a session of the vm profile name: a warm guest
// (or one booted for it) given the serve plan, and the session made by
// the guest's server.
func (s *Server) createVMSession(ctx context.Context, caller peer, name string, spec jail.Spec, idle, ttl time.Duration, req *api.SessionRequest) (*api.SessionCreated, *api.Error) {
	admitted := time.Now()
	if e := s.reserveSession(caller); e != nil {
		return nil, e
	}
	held := true
	defer func() {
		if held {
			s.sessions.unreserve(caller.owner())
		}
	}()
	wg, use, e := s.takeGuest(ctx, name)
	if e != nil {
		return nil, e
	}
	fail := func(status int, format string, a ...any) (*api.SessionCreated, *api.Error) {
		if err := wg.Close(s.budget); err != nil {
			s.closeFailed(err)
		}
		return nil, &api.Error{Status: status, Msg: fmt.Sprintf(format, a...)}
	}
	// The guest's server has the same profile: the request goes on as
	// made, but for what the host keeps (its profile name, ttl, idle).
	fwd := *req
	fwd.Profile, fwd.TTL, fwd.IdleTimeout = "", "", ""
	gc := client.Over(wg, client.Options{MaxAnswer: s.vmAnswerMax(spec)})
	// A guest that never answers holds no create for ever.
	cctx, cancel := context.WithTimeout(ctx, vmStartEmulated+time.Minute)
	guestID, err := s.guestSession(cctx, gc, wg, &fwd)
	cancel()
	if err != nil {
		var ce *client.Error
		if errors.As(err, &ce) && ce.Status >= 400 && ce.Status < 500 {
			return fail(ce.Status, "%s", ce.Body.Msg)
		}
		return fail(502, "start the session in its guest: %v", err)
	}
	if !guestIDOK(guestID) {
		return fail(502, "start the session in its guest: it answered a session id %.80q", guestID)
	}
	now := time.Now()
	v := &vmSession{id: newID(), profile: name, owner: caller.owner(), guest: wg, guestID: guestID, spec: spec,
		limits: sessionLimitsOf(spec, idle, ttl), created: now, idle: idle, pool: use, expires: now.Add(ttl), lastUsed: now,
		calls: make(chan struct{}, vmCallsInFlight), execSlot: make(chan struct{}, 1)}
	use.WaitedMs = ms(time.Since(admitted))
	v.pool = use
	s.vm.mu.Lock()
	closing := s.sessions.closingNow()
	if !closing {
		s.vm.byID[v.id] = v
	}
	s.vm.mu.Unlock()
	if closing {
		return fail(503, "shutting down: no new sessions")
	}
	held = false
	if err := s.auditVM("session_start", v, caller, nil, nil); err != nil && s.cfg.AuditRequired {
		s.endVMSession(v, api.SessionFailed, "its audit line could not be written (--audit-required)")
		return nil, &api.Error{Status: 503, Msg: fmt.Sprintf("the session was not started: its audit line could not be written (--audit-required): %v", err)}
	}
	go func() {
		<-wg.Done()
		why := "its guest ended"
		if err := wg.Err(); err != nil {
			why = "its guest ended: " + err.Error()
		}
		s.endVMSession(v, api.SessionKilled, why)
	}()
	s.logf("session %s (profile %s, uid %d): in a guest of its own", v.id, name, caller.uid)
	return &api.SessionCreated{SessionID: v.id, Profile: name, Limits: v.limits, CreatedAt: now,
		ExpiresAt: v.expires, IdleExpiresAt: now.Add(idle), Pool: use}, nil
}

// guestSession is the guest's session for req: the one the warm guest
// made, given req's files, when req asks for no other limits and no
// environment; else one made now (the made one ended first: the guest's
// server holds one).
func (s *Server) guestSession(ctx context.Context, gc *client.Client, wg *warmGuest, req *api.SessionRequest) (string, error) {
	if wg.made != "" && len(req.Limits) == 0 && len(req.Env) == 0 {
		for p, b64 := range req.Files {
			data, _ := base64.StdEncoding.DecodeString(b64) // checkFiles passed it
			if _, err := gc.WriteFile(ctx, wg.made, p, bytes.NewReader(data)); err != nil {
				return "", fmt.Errorf("files: %s: %w", p, err)
			}
		}
		return wg.made, nil
	}
	if wg.made != "" {
		if _, err := gc.EndSession(ctx, wg.made); err != nil {
			return "", err
		}
	}
	created, err := gc.CreateSession(ctx, req)
	if err != nil {
		return "", err
	}
	return created.SessionID, nil
}

// guestIDOK admits the guest's session id into the paths of the calls
// the host makes on the channel: the guest's server's ids are hex.
func guestIDOK(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// endVMSession ends v (once): its guest's VMM killed, its cgroup and run
// directory removed, its budget and quota given back.
func (s *Server) endVMSession(v *vmSession, verdict api.Verdict, why string) bool {
	if !s.vm.take(v, verdict, why) {
		return false
	}
	v.mu.Lock()
	v.ended = true
	v.mu.Unlock()
	s.sessions.unreserve(v.owner)
	if err := v.guest.Close(s.budget); err != nil {
		s.closeFailed(err)
	}
	w := why
	_ = s.auditVM("session_end", v, peer{uid: v.owner.UID, tenant: v.owner.Tenant}, nil, &AuditOutcome{Verdict: verdict, WallMs: ms(time.Since(v.created)), Error: &w})
	s.logf("session %s ended (%s): %s", v.id, verdict, why)
	return true
}

// vmJanitor ends VM sessions past their ttl or idle timeout.
func (s *Server) vmJanitor(now time.Time) {
	for _, v := range s.vm.all() {
		v.mu.Lock()
		ttlOver := now.After(v.expires)
		idleOver := v.busy == 0 && now.After(v.lastUsed.Add(v.idle))
		life := v.expires.Sub(v.created).Round(time.Millisecond)
		v.mu.Unlock()
		switch {
		case ttlOver:
			s.endVMSession(v, api.SessionTTL, fmt.Sprintf("its lifetime of %v ran out", life))
		case idleOver:
			s.endVMSession(v, api.SessionIdle, fmt.Sprintf("no request for its idle timeout of %v", v.idle))
		}
	}
}

// closeVMSessions ends every VM session: the server is stopping.
func (s *Server) closeVMSessions() {
	for _, v := range s.vm.all() {
		s.endVMSession(v, api.SessionShutdown, "the server stopped")
	}
}

// vmRoutes sends the requests for a VM session's routes to the guest;
// every other request goes to next.
func (s *Server) vmRoutes(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rest, ok := strings.CutPrefix(r.URL.Path, "/v1/sessions/")
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		id, sub, _ := strings.Cut(rest, "/")
		if !s.vm.known(id) {
			next.ServeHTTP(w, r)
			return
		}
		s.admitted("GET, POST, PUT, DELETE", "a session's route", func(w http.ResponseWriter, r *http.Request, caller peer) {
			s.forwardVM(w, r, caller, id, sub)
		})(w, r)
	})
}

// forwardVM answers a request on VM session id's route sub ("", "exec",
// "files/PATH", ...) for caller.
func (s *Server) forwardVM(w http.ResponseWriter, r *http.Request, caller peer, id, sub string) {
	v, tomb := s.vm.get(id, caller.owner())
	switch {
	case tomb != nil:
		s.writeError(w, &api.Error{Status: 410, Msg: fmt.Sprintf("session %s ended (%s): %s; it is closed and its /work is gone", id, tomb.end.Verdict, tomb.end.Why)})
		return
	case v == nil:
		s.writeError(w, &api.Error{Status: 404, Msg: fmt.Sprintf("no session %q (GET /v1/sessions lists yours)", id)})
		return
	}
	done, ok := s.admitBody(w, r, caller)
	if !ok {
		return
	}
	defer done()
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBody))
	if err != nil {
		s.writeError(w, &api.Error{Status: 413, Msg: fmt.Sprintf("request body over --max-body %d bytes, or unreadable: %v", s.cfg.MaxBody, err)})
		return
	}
	v.touch(1)
	defer v.touch(-1)
	switch {
	case sub == "" && r.Method == http.MethodDelete:
		s.deleteVM(w, v)
		return
	case sub == "ttl" && r.Method == http.MethodPost:
		if e := s.vmTTL(v, body); e != nil {
			s.writeError(w, e)
			return
		}
		sub, body = "", nil
		r = r.Clone(r.Context())
		r.Method = http.MethodGet
	}
	stream := sub == "exec" && strings.Contains(r.Header.Get("Accept"), api.NDJSON)
	var code *string
	if sub == "exec" {
		// The guest's server checks the request; the host logs its code.
		var req api.ExecRequest
		_ = json.Unmarshal(body, &req)
		if code = req.Code; code == nil {
			code = new(string)
		}
		if err := s.auditVM("exec_start", v, caller, code, nil); err != nil && s.cfg.AuditRequired {
			s.writeError(w, &api.Error{Status: 503, Msg: fmt.Sprintf("the exec was not run: its audit line could not be written (--audit-required): %v", err)})
			return
		}
	}
	var netBefore []jail.NetworkDecision
	if sub == "exec" {
		// One exec at a time, here as in the guest (whose server queues
		// the session's execs): an exec's network list is what the host's
		// list gained between its "before" and its answer, and a "before"
		// taken while another exec still runs would give this one the
		// other's connections and refusals.
		// It waits no longer than a jail session's exec does.
		wait := time.NewTimer(s.cfg.QueueWait)
		var busy *api.Error
		select {
		case v.execSlot <- struct{}{}:
			defer func() { <-v.execSlot }()
		case <-wait.C:
			busy = &api.Error{Status: 409, Msg: fmt.Sprintf("session %s is busy: an exec has run for longer than %v (--queue-wait); POST .../interrupt stops it", v.id, s.cfg.QueueWait)}
		case <-r.Context().Done():
			busy = &api.Error{Status: 499, Msg: "the caller went away"}
		}
		wait.Stop()
		if busy != nil {
			_ = s.auditVM("exec_end", v, caller, code, &AuditOutcome{Verdict: api.ExecFailed, Error: &busy.Msg})
			s.writeError(w, busy)
			return
		}
		netBefore = v.guest.Network()
	}
	// A streamed exec's output lines go to the caller as the guest's
	// server writes them; its result line comes back as the answer.
	var lines func([]byte) error
	started := false
	if stream {
		out := &ndjson{w: w, rc: http.NewResponseController(w), timeout: s.cfg.WriteTimeout, cancel: func() {}}
		lines = func(l []byte) error {
			if !started {
				started = true
				out.begin()
			}
			out.write(l)
			if out.dead {
				return errStreamTaken
			}
			return nil
		}
	}
	status, ct, answer, e := s.callVM(r.Context(), v, r.Method, sub, r.URL.RawQuery, r.Header.Get("Content-Type"), body, lines)
	notices := ""
	if e == nil && sub == "exec" && status == 200 {
		answer, notices = vmExecNetwork(answer, networkSince(netBefore, v.guest.Network()), v.spec.Network.Enabled())
	}
	if e != nil {
		if code != nil {
			msg := e.Msg
			_ = s.auditVM("exec_end", v, caller, code, &AuditOutcome{Verdict: api.ExecFailed, Error: &msg})
		}
		if started {
			// The stream began: it ends with the error as its last line.
			l, _ := json.Marshal(map[string]string{"error": e.Msg})
			w.Write(append(l, '\n'))
			return
		}
		s.writeError(w, e)
		return
	}
	if code != nil {
		var res api.ExecResult
		_ = json.Unmarshal(answer, &res)
		o := guestOutcome(&res)
		if status != 200 {
			msg := fmt.Sprintf("%d", status)
			o.Verdict, o.Error = api.ExecFailed, &msg
		}
		_ = s.auditVM("exec_end", v, caller, code, o)
	}
	if sub == "exec" && status == 200 {
		v.mu.Lock()
		v.execs++
		v.mu.Unlock()
	}
	if strings.HasPrefix(ct, "application/json") {
		answer = s.hostView(v, answer)
	}
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
	if stream && status == 200 {
		// The result is the stream's last line (a guest whose server
		// answered whole: its one line, the output in it, as a plain
		// exec's is), after the notices of the host's refusals.
		if !started {
			w.Header().Set("Content-Type", api.NDJSON)
			w.WriteHeader(200)
		}
		if notices != "" {
			l, _ := json.Marshal(api.StreamLine{Type: api.StreamStderr, Data: notices})
			w.Write(append(l, '\n'))
		}
		w.Write(append(bytes.TrimSpace(answer), '\n'))
		return
	}
	if ct != "" {
		w.Header().Set("Content-Type", ct)
	}
	w.WriteHeader(status)
	w.Write(answer)
}

// vmExecNetwork lays the host's decisions of one exec (what the host's
// proxy's list gained around it, as a jail session's exec takes its
// share) over the guest's exec result: its network list is the host's
// entries merged with the guest's (vmtier.MergeNetwork, as a single run's
// is), and its stderr gains the notices of the host's refusals, which
// the guest's server never saw. An answer that is not an exec result
// passes as it came.
func vmExecNetwork(answer []byte, host []jail.NetworkDecision, enabled bool) (out []byte, notices string) {
	var top map[string]json.RawMessage
	if json.Unmarshal(answer, &top) != nil {
		return answer, ""
	}
	// A guest that leaves its network list or stderr out (or sends them
	// as something else) does not keep the host's entries out: its word
	// is then none.
	var guest []jail.NetworkDecision
	if json.Unmarshal(top["network"], &guest) != nil {
		guest = nil
	}
	var stderr string
	if json.Unmarshal(top["stderr"], &stderr) != nil {
		stderr = ""
	}
	if len(host) == 0 && !slices.ContainsFunc(guest, func(d jail.NetworkDecision) bool { return d.Allowed }) {
		return answer, "" // nothing of the host's, nothing the guest claims allowed
	}
	top["network"], _ = json.Marshal(vmtier.MergeNetwork(host, guest))
	with := withNetworkNotices(stderr, host, !enabled, nil)
	top["stderr"], _ = json.Marshal(with)
	out, err := json.Marshal(top)
	if err != nil {
		return answer, ""
	}
	return out, with[len(stderr):]
}

// execVerdicts are the verdicts an exec can have.
var execVerdicts = map[api.Verdict]bool{api.ExecMemory: true, api.ExecFailed: true, api.ExecTimeout: true, api.ExecInterrupted: true,
	api.ExecKilled: true, api.ExecOutput: true, api.ExecException: true, api.ExecOK: true}

// maxAuditBlocked bounds the blocked system calls of a guest's exec in
// its audit line.
const maxAuditBlocked = 64

// guestOutcome is a guest's exec result as its audit line has it, held to
// what an exec's can be: a verdict of an exec's (else "error", saying
// what the guest claimed), a state of "kept" or "lost", a bounded list of
// blocked calls with bounded names. The guest writes what it likes, up to
// the answer's bound; one audit line must not carry megabytes of it.
func guestOutcome(res *api.ExecResult) *AuditOutcome {
	o := &AuditOutcome{Verdict: res.Verdict, WallMs: res.WallMs}
	if !execVerdicts[o.Verdict] {
		msg := fmt.Sprintf("the guest answered verdict %.40q", string(o.Verdict))
		o.Verdict, o.Error = api.ExecFailed, &msg
	}
	if res.State == "kept" || res.State == "lost" {
		o.State = res.State
	}
	for i, b := range res.BlockedSyscalls {
		if i == maxAuditBlocked {
			break
		}
		o.Blocked = append(o.Blocked, api.BlockedSyscall{Name: fmt.Sprintf("%.32s", b.Name), Count: b.Count, Example: fmt.Sprintf("%.200s", b.Example)})
	}
	return o
}

// callVM makes one call to v's guest and reads its answer within the
// bound. A guest gone, or past the bound, ends the session: 410; a
// session with vmCallsInFlight calls in its guest takes no more: 429.
// With lines, the call asks for a stream (Accept: NDJSON): each output
// line the guest's server streams goes to lines, re-encoded (its type
// and data only), as it comes, and the answer is the result line; the
// bound holds for the whole stream.
func (s *Server) callVM(ctx context.Context, v *vmSession, method, sub, query, ctype string, body []byte, lines func([]byte) error) (int, string, []byte, *api.Error) {
	target := "/v1/sessions/" + v.guestID
	if sub != "" {
		target += "/" + sub
	}
	if query != "" {
		target += "?" + query
	}
	select {
	case v.calls <- struct{}{}:
		defer func() { <-v.calls }()
	default:
		return 0, "", nil, &api.Error{Status: 429, Msg: fmt.Sprintf("session %s has %d calls in its guest already: wait for one", v.id, vmCallsInFlight)}
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://guest"+target, bytes.NewReader(body))
	if err != nil {
		return 0, "", nil, badRequest("%v", err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if lines != nil {
		req.Header.Set("Accept", api.NDJSON)
	}
	resp, err := v.guest.RoundTrip(req)
	if err != nil {
		select {
		case <-v.guest.Done():
			s.endVMSession(v, api.SessionKilled, "its guest ended: "+err.Error())
			return 0, "", nil, s.vmGone(v)
		default:
		}
		if ctx.Err() != nil {
			return 0, "", nil, &api.Error{Status: 499, Msg: "the caller went away"}
		}
		return 0, "", nil, &api.Error{Status: 502, Msg: "the session's guest: " + err.Error()}
	}
	defer resp.Body.Close()
	max := s.vmAnswerMax(v.spec)
	var answer []byte
	if lines != nil && resp.StatusCode == 200 && strings.HasPrefix(resp.Header.Get("Content-Type"), api.NDJSON) {
		answer, err = vmStream(io.LimitReader(resp.Body, max+1), max, lines)
		if errors.Is(err, errStreamTaken) {
			return 0, "", nil, &api.Error{Status: 499, Msg: "the caller went away"}
		}
		if err == nil {
			return 200, "application/json", answer, nil
		}
	} else {
		answer, err = io.ReadAll(io.LimitReader(resp.Body, max+1))
		if err == nil && int64(len(answer)) > max {
			err = fmt.Errorf("an answer over %d bytes", max)
		}
	}
	if err != nil {
		s.endVMSession(v, api.SessionFailed, "its guest broke the channel's bound: "+err.Error())
		return 0, "", nil, s.vmGone(v)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), answer, nil
}

// errStreamTaken: a streamed exec's caller did not take a line in time.
var errStreamTaken = errors.New("the caller did not take a line in time")

// vmStream reads a guest's streamed answer from r (max bytes of it at
// most) line by line: each output line, re-encoded with its type and
// data alone, to lines; the result line, when it comes, is returned.
// What is neither is dropped.
func vmStream(r io.Reader, max int64, lines func([]byte) error) ([]byte, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var n int64
	for {
		l, err := br.ReadBytes('\n')
		if n += int64(len(l)); n > max {
			return nil, fmt.Errorf("a streamed answer over %d bytes", max)
		}
		var sl api.StreamLine
		if len(bytes.TrimSpace(l)) > 0 && json.Unmarshal(l, &sl) == nil {
			switch sl.Type {
			case api.StreamResult:
				return bytes.TrimSpace(l), nil
			case api.StreamStdout, api.StreamStderr:
				out, _ := json.Marshal(api.StreamLine{Type: sl.Type, Data: sl.Data})
				if lines(append(out, '\n')) != nil {
					return nil, errStreamTaken
				}
			}
		}
		if err == io.EOF {
			return nil, errors.New("the stream ended without its result")
		}
		if err != nil {
			return nil, err
		}
	}
}

// vmGone is the answer for v, ended: its tombstone's 410.
func (s *Server) vmGone(v *vmSession) *api.Error {
	_, tomb := s.vm.get(v.id, v.owner)
	if tomb == nil {
		return &api.Error{Status: 410, Msg: fmt.Sprintf("session %s ended", v.id)}
	}
	return &api.Error{Status: 410, Msg: fmt.Sprintf("session %s ended (%s): %s; it is closed and its /work is gone", v.id, tomb.end.Verdict, tomb.end.Why)}
}

// hostView lays the host's word over a JSON answer of the guest's: the
// session's id (the guest's never leaves the host), its profile, and the
// clocks the host keeps, at the top and in a nested "session".
func (s *Server) hostView(v *vmSession, answer []byte) []byte {
	var top map[string]json.RawMessage
	if json.Unmarshal(answer, &top) != nil {
		return bytes.ReplaceAll(answer, []byte(v.guestID), []byte(v.id))
	}
	v.mu.Lock()
	expires, idleExpires := v.expires, v.lastUsed.Add(v.idle)
	v.mu.Unlock()
	patch := func(m map[string]json.RawMessage) {
		set := func(k string, val any) {
			if _, ok := m[k]; ok {
				m[k], _ = json.Marshal(val)
			}
		}
		set("session_id", v.id)
		set("profile", v.profile)
		set("created_at", v.created)
		set("pool", v.pool)
		set("expires_at", expires)
		set("idle_expires_at", idleExpires)
		set("limits", v.limits)
		for k, raw := range m {
			if k == "session_id" || k == "profile" {
				continue
			}
			m[k] = json.RawMessage(bytes.ReplaceAll(raw, []byte(v.guestID), []byte(v.id)))
		}
	}
	patch(top)
	if raw, ok := top["session"]; ok {
		var inner map[string]json.RawMessage
		if json.Unmarshal(raw, &inner) == nil {
			patch(inner)
			top["session"], _ = json.Marshal(inner)
		}
	}
	out, err := json.Marshal(top)
	if err != nil {
		return answer
	}
	return out
}

// vmTTL is POST .../ttl for a VM session: the host's clock moves, within
// --session-ttl and --session-max-life from its start.
func (s *Server) vmTTL(v *vmSession, body []byte) *api.Error {
	var req api.TTLRequest
	if err := decodeJSON(body, &req); err != nil {
		return err.(*api.Error)
	}
	if req.TTL == "" {
		return badRequest("ttl: missing (\"30m\": the session ends 30 minutes from now)")
	}
	ttl, err := sessionDuration("ttl", req.TTL, s.cfg.SessionTTL)
	if err != nil {
		return err.(*api.Error)
	}
	now := time.Now()
	last := v.created.Add(s.cfg.SessionMaxLife)
	if now.Add(ttl).After(last) {
		return &api.Error{Status: 422, Msg: fmt.Sprintf("ttl: %v from now is past the session's longest life of %v from its start, %s (--session-max-life); at most %v from now",
			ttl, s.cfg.SessionMaxLife, last.UTC().Format(time.RFC3339), last.Sub(now).Round(time.Second))}
	}
	v.mu.Lock()
	v.expires = now.Add(ttl)
	v.mu.Unlock()
	return nil
}

// deleteVM is DELETE for a VM session: the guest's accounting, asked
// for briefly, then the guest ended.
func (s *Server) deleteVM(w http.ResponseWriter, v *vmSession) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	status, _, answer, _ := s.callVM(ctx, v, http.MethodDelete, "", "", "", nil, nil)
	cancel()
	end := api.SessionEnd{}
	if status != 200 || json.Unmarshal(answer, &end) != nil {
		end = api.SessionEnd{}
	}
	if host := v.guest.Network(); host != nil {
		end.Network = vmtier.MergeNetwork(host, end.Network)
	}
	if !s.endVMSession(v, api.SessionClosed, "closed by DELETE") {
		s.writeError(w, s.vmGone(v))
		return
	}
	v.mu.Lock()
	execs := v.execs
	v.mu.Unlock()
	now := time.Now()
	end.SessionID, end.Verdict, end.Why = v.id, api.SessionClosed, "closed by DELETE"
	end.CreatedAt, end.EndedAt, end.WallMs = v.created, now, ms(now.Sub(v.created))
	end.ExecutionCount = execs
	s.writeJSON(w, 200, end)
}

// vmList is the caller's VM sessions for GET /v1/sessions, each as its
// guest describes it under the host's word.
func (s *Server) vmList(ctx context.Context, caller peer) []api.SessionInfo {
	var out []api.SessionInfo
	for _, v := range s.vm.all() {
		if v.owner != caller.owner() {
			continue
		}
		status, _, answer, e := s.callVM(ctx, v, http.MethodGet, "", "", "", nil, nil)
		var info api.SessionInfo
		if e != nil || status != 200 || json.Unmarshal(s.hostView(v, answer), &info) != nil {
			// A guest that does not answer hides no session of the host's:
			// the list is what a gateway counts max_sessions by. One that
			// ended meanwhile (callVM ended it) is gone.
			if live, _ := s.vm.get(v.id, v.owner); live == nil {
				continue
			}
			info = vmHostInfo(v)
		}
		out = append(out, info)
	}
	return out
}

// vmHostInfo is a vm session as the host knows it, for when its guest
// does not say.
func vmHostInfo(v *vmSession) api.SessionInfo {
	v.mu.Lock()
	defer v.mu.Unlock()
	return api.SessionInfo{SessionID: v.id, Profile: v.profile, Alive: !v.ended, Busy: v.busy > 0, ExecutionCount: v.execs,
		CreatedAt: v.created, LastUsedAt: v.lastUsed, ExpiresAt: v.expires, IdleExpiresAt: v.lastUsed.Add(v.idle), Limits: v.limits, Pool: v.pool}
}

// closingNow reports whether shutdown began: no session may be added.
func (t *sessionTable) closingNow() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closing
}

// runVM is POST /v1/run of a vm profile: the run, as made, in a guest of
// its own (a warm one when the pool has it), ended with the answer. The
// guest's server runs it in its jail; the host bounds the answer (the
// client's bound) and lays its own pool's word over it.
func (s *Server) runVM(ctx context.Context, req *runRequest, spec jail.Spec) (*api.RunResponse, *api.Error) {
	admitted := time.Now()
	wg, use, e := s.takeGuest(ctx, req.Profile)
	if e != nil {
		return nil, e
	}
	defer func() {
		if err := wg.Close(s.budget); err != nil {
			s.closeFailed(err)
		}
	}()
	use.WaitedMs = ms(time.Since(admitted))
	// The guest's own timeout ends the run; this one ends a guest that
	// does not answer.
	ctx, cancel := context.WithTimeout(ctx, spec.Timeout+2*time.Minute)
	defer cancel()
	fwd := *req.RunRequest
	fwd.Profile = ""
	resp, err := client.Over(wg, client.Options{MaxAnswer: s.vmAnswerMax(spec)}).Run(ctx, &fwd)
	if err != nil {
		var ce *client.Error
		if errors.As(err, &ce) && ce.Status >= 400 && ce.Status < 500 {
			return nil, &api.Error{Status: ce.Status, Msg: ce.Body.Msg}
		}
		return nil, &api.Error{Status: 502, Msg: "the run's guest: " + err.Error()}
	}
	if resp.Result == nil {
		return nil, &api.Error{Status: 502, Msg: "the run's guest answered no result"}
	}
	vmtier.HoldResult(spec, resp.Result)
	// The guest was this run's alone: what its host's proxy decided is
	// the run's.
	if host := wg.Network(); host != nil {
		resp.Result.Network = vmtier.MergeNetwork(host, resp.Result.Network)
	}
	resp.Pool = use
	return resp, nil
}

// auditVM writes a vm session's audit line: its start and end, and each
// exec's (the code's hash, then the verdict), as a jail session's.
func (s *Server) auditVM(event string, v *vmSession, caller peer, code *string, o *AuditOutcome) error {
	l := v.limits
	e := AuditEntry{Event: event, RunID: v.id, SessionID: v.id, Time: time.Now().UTC(), UID: caller.uid, PID: caller.pid, Tenant: caller.tenant,
		Profile: v.profile, Limits: AuditLimits{TimeoutMs: l.TimeoutMs, CPUTimeMs: l.CPUTimeMs, MemoryBytes: l.MemoryBytes,
			CPUs: l.CPUs, Pids: l.Pids, OutputLimit: l.OutputBytes, Seccomp: l.Seccomp}, Pool: v.pool, AuditOutcome: o}
	if code != nil {
		h := sha256.New()
		hashString(h, *code)
		e.CodeSHA256, e.CodeBytes = hex.EncodeToString(h.Sum(nil)), len(*code)
	}
	return s.writeAudit(e)
}
