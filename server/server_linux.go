package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/profiles"
	"github.com/stockade/stockade/server/internal/capacity"
	"github.com/stockade/stockade/server/internal/kernel"
	"github.com/stockade/stockade/vmtier"
	"golang.org/x/sys/unix"
)

// Profile is one profile the server offers: its name in requests and its
// policy, loaded and validated (the CLI resolves profiles; the server
// never reads a file). Every jail of it, pooled or made for a request, is
// built from Policy by Profile.Spec; a request's limits are one more layer
// over it, which may only tighten it.
type Profile struct {
	Name   string
	Policy *profiles.Profile
}

// Config is the whole server. Zero fields get the defaults of Defaults,
// but those whose zero means none (see withDefaults).
type Config struct {
	Profiles    []Profile     // the first is the default
	Host        jail.Host     // the machine's part of every jail (cgroup parent, upstream proxy, ...)
	Pool        int           // jails kept prepared per profile (0: no pool)
	Concurrency int           // runs at once
	Queue       int           // requests waiting for a run slot
	QueueWait   time.Duration // how long one may wait
	PerCaller   int           // runs and waits of one caller uid at once (0: no cap)
	MaxBody     int64         // request body bytes
	// The bytes of request bodies held at once (being read, waiting or
	// running), each counted at its Content-Length (--max-body without).
	BodyBudget int64
	// How long a request's body may take to arrive, and one response
	// write (a streamed line, a whole response) to be taken by the caller.
	BodyTimeout, WriteTimeout time.Duration
	// How long a keep-alive connection may wait for its next request.
	IdleTimeout time.Duration
	// Connections open at once, in all and per caller uid; past these a
	// connection is answered 503 and closed before anything is read.
	MaxConns, MaxConnsPerCaller int
	AllowUIDs                   []uint32 // callers admitted (empty: whoever can open the socket)
	// The budget every live jail, waiting or running, counts against: its
	// cgroup's memory and pids limits added up (0: no budget).
	BudgetMemory, BudgetPids int64
	FilesMax                 int64 // bytes of files and images a response returns
	// Sessions: the most idle time and lifetime one may ask for (also
	// their defaults), and how many the server holds at once, in all
	// (0: no cap) and per caller uid (0: no cap).
	SessionIdle, SessionTTL     time.Duration
	Sessions, SessionsPerCaller int
	// SessionMaxLife bounds a session's whole life, from its start, over
	// every POST .../ttl (0: SessionTTL, so that no extension outlives
	// the lifetime the operator set).
	SessionMaxLife time.Duration
	// SessionLayer is the profile layer laid over every offered profile
	// for sessions alone (serve's --session-timeout and the like): the
	// limits of each exec, which the server applies, never the jail's.
	// nil: SessionDefaults alone.
	SessionLayer *profiles.Profile
	Grace        time.Duration
	// VMPool is how many booted guests each profile with isolation =
	// "vm" keeps waiting for a session (server/vm_linux.go); VM is the VM
	// tier's host side (its binary, kernel, cache).
	VMPool int
	VM     vmtier.Options
	// SessionStart bounds a new session's (or a restart's) interpreter
	// from its job to its first answer (0: 30 s). A vm session's guest
	// server gets more under emulation, where Python starts ten times
	// slower.
	SessionStart time.Duration
	Audit        *AuditLog // one JSON line per run (nil: none)
	// AuditRequired: no run without its audit line. Each run's start line
	// is written before its code reaches the jail, and a run whose line
	// cannot be written is refused (503).
	AuditRequired bool
	Log           io.Writer // the operator's log (stderr)
	Notices       *os.File  // jail set-up remarks
	Facts         []string  // what the host supports (the doctor's facts)
	Version       string
}

// Defaults is the server's configuration when no flag says otherwise,
// less what only its caller can give (profiles, host, writers): `stockade
// serve`'s flags take their defaults from it, and `stockade mcp`'s own
// pool runs with it, so the two cannot drift apart (the own pool had no
// session cap at all: 40 sessions, 2.5 GB, for whoever reached its --http
// port).
func Defaults() Config {
	return Config{
		Pool: 2, VMPool: 1, Concurrency: 8, Queue: 64, QueueWait: 10 * time.Second,
		MaxBody: 16 << 20, BodyBudget: 128 << 20, BodyTimeout: 30 * time.Second, WriteTimeout: 10 * time.Second,
		IdleTimeout: 30 * time.Second, MaxConns: 1024, MaxConnsPerCaller: 128, FilesMax: 8 << 20,
		SessionIdle: 10 * time.Minute, SessionTTL: time.Hour, Sessions: 32, SessionsPerCaller: 8,
		Grace: 10 * time.Second,
	}
}

// withDefaults fills the zero fields of c from Defaults, but those whose
// zero means none (the pool, the caps on callers and sessions, the
// budgets).
func (c Config) withDefaults() Config {
	d := Defaults()
	for _, f := range []struct{ v, def *int }{
		{&c.Concurrency, &d.Concurrency}, {&c.Queue, &d.Queue}, {&c.MaxConns, &d.MaxConns}, {&c.MaxConnsPerCaller, &d.MaxConnsPerCaller},
	} {
		if *f.v <= 0 {
			*f.v = *f.def
		}
	}
	for _, f := range []struct{ v, def *int64 }{{&c.MaxBody, &d.MaxBody}, {&c.BodyBudget, &d.BodyBudget}, {&c.FilesMax, &d.FilesMax}} {
		if *f.v <= 0 {
			*f.v = *f.def
		}
	}
	for _, f := range []struct{ v, def *time.Duration }{
		{&c.QueueWait, &d.QueueWait}, {&c.BodyTimeout, &d.BodyTimeout}, {&c.WriteTimeout, &d.WriteTimeout},
		{&c.IdleTimeout, &d.IdleTimeout}, {&c.Grace, &d.Grace}, {&c.SessionIdle, &d.SessionIdle}, {&c.SessionTTL, &d.SessionTTL},
	} {
		if *f.v <= 0 {
			*f.v = *f.def
		}
	}
	if c.SessionMaxLife <= 0 {
		c.SessionMaxLife = c.SessionTTL
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	return c
}

// Server is a running `stockade serve`.
type Server struct {
	cfg      Config
	policies map[string]*profiles.Profile // each offered profile, as served
	specs    map[string]jail.Spec         // and the spec of its pooled jails
	// sessionPolicies and sessionSpecs are each profile with the session
	// layers over it (SessionDefaults, Config.SessionLayer): a session's
	// ceilings and defaults.
	sessionPolicies map[string]*profiles.Profile
	sessionSpecs    map[string]jail.Spec
	pools           map[string]*capacity.Pool[*ready]
	gate            *capacity.Gate
	budget          *capacity.Budget
	bodies          *bodyBudget
	started         time.Time
	runSeq          atomic.Int64 // numbers the runs in the audit log
	// aslrWarned: the log has said once that ASLR is off, so that a
	// session cannot tell its driver replaced (internal/kernel/image_linux.go).
	aslrWarned atomic.Bool
	logMu      sync.Mutex
	sessions   *sessionTable
	metrics    *metrics
	// releasing counts the jails (a run's after its answer, a session's)
	// being released in the background; Serve waits for them before its
	// sweep. Adds are made by admitted requests (inflight) or sessions,
	// all counted before Serve waits.
	releasing sync.WaitGroup
	// beforeTeardown, when set (tests only), runs before each run's jail
	// is torn down, after its answer.
	beforeTeardown func()

	// runs is the context every run descends from; Serve cancels it, with
	// the reason, when the grace period runs out.
	runs     context.Context
	killRuns context.CancelCauseFunc

	// Requests that may use a jail. A WaitGroup alone cannot tell
	// shutdown about a handler that net/http started just as the server
	// closed (a connection whose request had just been read): its Add
	// could come after Wait returned, and it would take a jail from a
	// drained pool or make one while the process exits. So Adds are made
	// under runMu and only until closing is set.
	runMu    sync.Mutex
	closing  bool
	inflight sync.WaitGroup

	// The /v1 handler, made once: Serve's socket and ServeTenant (a
	// cluster node's requests, cluster_linux.go) share it.
	muxOnce   sync.Once
	mux       http.Handler
	tenantIDs tenants

	// The VM tier's sessions (vm_linux.go): each vm profile's pool of
	// warm guests, the sessions in guests, and how a guest is booted
	// (tests: a fake).
	vmPools map[string]*capacity.Pool[*warmGuest]
	// vmCharge is what each guest of a vm profile holds of the budget
	// (vmtier.HostMemory: its VMM's cgroup, not the profile's memory).
	vmCharge map[string]int64
	vm       *vmTable
	vmBoot   func(context.Context, jail.Spec) (vmGuest, error)
}

// closeFailed reports a jail's close that left something behind. The
// jail's run lock slot keeps the record; the next jail's start (any
// stockade's) sweeps it, and Serve does before it returns.
func (s *Server) closeFailed(err error) {
	s.logf("a jail's close left something behind, to be removed again: %v", err)
}

// sweepTimeout bounds how long shutdown keeps trying to remove what
// jails' closes could not. A cgroup's removal waits for its last tasks to
// finish exiting, which the kernel may take a while over on a busy host
// (cgroup.Delete itself gives it 2 s).
const sweepTimeout = 10 * time.Second

// sweep removes, before Serve returns, what jails' closes left behind
// (a failed set-up's close too, which only the jail's notices tell of),
// trying again for up to sweepTimeout.
func (s *Server) sweep() error {
	err := jail.Sweep(s.cfg.Notices)
	if err == nil {
		return nil
	}
	s.logf("removing what jails' closes left behind, for up to %v: %v", sweepTimeout, err)
	deadline := time.Now().Add(sweepTimeout)
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		if time.Now().Add(wait).After(deadline) {
			return err
		}
		time.Sleep(wait)
		if err = jail.Sweep(s.cfg.Notices); err == nil {
			return nil
		}
	}
}

// admit counts a request that may use a jail, unless shutdown began.
func (s *Server) admit() bool {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	if s.closing {
		return false
	}
	s.inflight.Add(1)
	return true
}

// stopAdmitting refuses the requests to come and waits for the admitted
// ones to end.
func (s *Server) stopAdmitting() {
	s.runMu.Lock()
	s.closing = true
	s.runMu.Unlock()
	s.inflight.Wait()
}

// New checks the configuration; Serve starts the pools and the server.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if len(cfg.Profiles) == 0 {
		return nil, errors.New("serve: no profile to offer")
	}
	if cfg.AuditRequired && cfg.Audit == nil {
		return nil, errors.New("serve: --audit-required needs an --audit-log to write to")
	}
	if cfg.MaxBody > cfg.BodyBudget {
		return nil, fmt.Errorf("serve: --max-body %d is more than --body-budget %d: no body that large could ever be read (raise --body-budget)", cfg.MaxBody, cfg.BodyBudget)
	}
	if cfg.SessionMaxLife < cfg.SessionTTL {
		return nil, fmt.Errorf("serve: --session-max-life %v is less than --session-ttl %v: a session asking for the ttl it may ask for could not live that long", cfg.SessionMaxLife, cfg.SessionTTL)
	}
	s := &Server{cfg: cfg, policies: map[string]*profiles.Profile{}, specs: map[string]jail.Spec{}, pools: map[string]*capacity.Pool[*ready]{},
		sessionPolicies: map[string]*profiles.Profile{}, sessionSpecs: map[string]jail.Spec{},
		gate:   capacity.NewGate(cfg.Concurrency, cfg.Queue, cfg.PerCaller, cfg.QueueWait),
		budget: capacity.NewBudget(cfg.BudgetMemory, cfg.BudgetPids), bodies: newBodyBudget(cfg.BodyBudget), started: time.Now(),
		sessions: newSessionTable(cfg.Sessions, cfg.SessionsPerCaller), metrics: newMetrics(),
		vmPools: map[string]*capacity.Pool[*warmGuest]{}, vmCharge: map[string]int64{}, vm: newVMTable()}
	s.vmBoot = s.bootGuest
	s.runs, s.killRuns = context.WithCancelCause(context.Background())
	for _, p := range cfg.Profiles {
		if p.Policy == nil {
			return nil, fmt.Errorf("serve: profile %s: no policy", p.Name)
		}
		if wd := p.Policy.Filesystem.Workdir; wd != profiles.WorkdirFresh && wd != profiles.WorkdirNone {
			// One host directory for every request would carry files from
			// one caller's run into the next.
			return nil, fmt.Errorf("serve: profile %s binds the host directory %s at /work; the server needs a fresh /work per run (workdir = \"fresh\" or \"none\")", p.Name, wd)
		}
		policy := profiles.Merge(serveLayer(), p.Policy)
		if err := policy.Validate(); err != nil {
			return nil, fmt.Errorf("serve: profile %s: %w", p.Name, err)
		}
		spec := policy.Spec(kernel.Args(), cfg.Host)
		if err := spec.Validate(); err != nil {
			return nil, fmt.Errorf("serve: profile %s: %w", p.Name, err)
		}
		if _, dup := s.policies[p.Name]; dup {
			return nil, fmt.Errorf("serve: profile %s given twice", p.Name)
		}
		s.policies[p.Name], s.specs[p.Name] = policy, spec
		sessionPolicy := profiles.Merge(policy, SessionDefaults())
		if cfg.SessionLayer != nil {
			sessionPolicy = profiles.Merge(sessionPolicy, cfg.SessionLayer)
		}
		if err := sessionPolicy.Validate(); err != nil {
			return nil, fmt.Errorf("serve: profile %s, for sessions: %w", p.Name, err)
		}
		s.sessionPolicies[p.Name], s.sessionSpecs[p.Name] = sessionPolicy, sessionPolicy.Spec(kernel.Args(), cfg.Host)
		jails := cfg.Pool
		if policy.Isolation == profiles.IsolationVM {
			// Its sessions run in guests (vm_linux.go): no jail of the
			// host's ever runs it.
			jails = 0
			s.vmPools[p.Name] = s.newVMPool(p.Name, s.sessionSpecs[p.Name])
		}
		s.pools[p.Name] = capacity.NewPool(p.Name, spec, jails, s.budget, func(ctx context.Context) (*ready, error) { return prepareJail(ctx, spec, cfg.Notices) }, s.logf, s.closeFailed)
	}
	return s, nil
}

func (s *Server) logf(format string, a ...any) {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	fmt.Fprintf(s.cfg.Log, "stockade serve: "+format+"\n", a...)
}

type ctxKey struct{}

// peer is the caller, from SO_PEERCRED: the kernel's word, taken when the
// connection was made.
type peer struct {
	uid, gid uint32
	pid      int32
	// tenant, for a request a cluster node serves in process
	// (ServeTenant): the gateway's word, its uid a number of its own;
	// clusterRun is then the cluster's id of the run.
	tenant, clusterRun string
}

// owner is who the caller is to the server's counts and sessions: its
// uid, or its tenant (a tenant is never a uid, whatever their numbers).
func (p peer) owner() capacity.Owner { return capacity.Owner{UID: p.uid, Tenant: p.tenant} }

func peerOf(c net.Conn) (peer, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return peer{}, errors.New("not a unix socket connection")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return peer{}, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return peer{}, err
	}
	if cerr != nil {
		return peer{}, cerr
	}
	return peer{uid: cred.Uid, gid: cred.Gid, pid: cred.Pid}, nil
}

// Serve answers on ln until ctx ends, then shuts down gracefully: it stops
// accepting, lets running jails finish for the grace period, kills the
// rest, and returns once every jail, cgroup and run directory is gone.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	defer s.killRuns(errors.New("the server stopped"))
	poolCtx, stopPools := context.WithCancel(context.Background())
	for _, p := range s.pools {
		go p.Refill(poolCtx)
	}
	for _, p := range s.vmPools {
		go p.Refill(poolCtx)
	}
	mux := s.handler()
	janitorCtx, stopJanitor := context.WithCancel(context.Background())
	defer stopJanitor()
	go s.janitor(janitorCtx)
	hs := &http.Server{
		Handler:           endUnreadBodies(mux),
		ReadHeaderTimeout: 10 * time.Second,
		// Unset, net/http falls back on ReadTimeout, unset too: a caller's
		// idle keep-alive connections would count against its
		// --max-conns-per-caller for ever.
		IdleTimeout: s.cfg.IdleTimeout,
		BaseContext: func(net.Listener) context.Context { return s.runs },
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			ctx = context.WithValue(ctx, connKey{}, c)
			p, err := peerOfConn(c)
			if err != nil {
				return ctx // no peer: refused in the handlers
			}
			return context.WithValue(ctx, ctxKey{}, p)
		},
	}
	served := make(chan error, 1)
	go func() {
		served <- hs.Serve(newConnLimiter(ln, s.cfg.MaxConns, s.cfg.MaxConnsPerCaller, s.logf))
	}()
	var err error
	select {
	case <-ctx.Done():
	case err = <-served:
	}
	s.logf("shutting down: no new requests; %v for running jails", s.cfg.Grace)
	grace, cancel := context.WithTimeout(context.Background(), s.cfg.Grace)
	if hs.Shutdown(grace) != nil {
		s.logf("grace period over: killing the jails still running")
		s.killRuns(fmt.Errorf("--grace %v ran out while the server shut down", s.cfg.Grace))
		// A killed run still answers (verdict cancelled), and a queued one
		// gets 503: their handlers reap and remove the jail, then write
		// within --write-timeout. Only what is still open after that is
		// closed unanswered.
		answered, stopWaiting := context.WithTimeout(context.Background(), s.cfg.WriteTimeout+sweepTimeout)
		if hs.Shutdown(answered) != nil {
			hs.Close()
		}
		stopWaiting()
	}
	cancel()
	// hs.Close does not wait for handlers, and neither call waits for a
	// handler started as the server closed.
	s.stopAdmitting()
	// Sessions outlive their requests: every one is killed and released
	// now, with its jail, cgroup and /work.
	stopJanitor()
	s.sessions.close()
	for _, ss := range s.sessions.all() {
		s.closeSession(ss, api.SessionShutdown, "the server stopped", true)
	}
	s.closeVMSessions()
	s.releasing.Wait()
	stopPools()
	for _, p := range s.pools {
		<-p.Drained()
	}
	for _, p := range s.vmPools {
		<-p.Drained()
	}
	if serr := s.sweep(); serr != nil {
		s.logf("stopped, leaving behind what could not be removed in %v (recorded in its run lock slot; the next stockade's start removes it): %v", sweepTimeout, serr)
	} else {
		s.logf("stopped: every jail, cgroup and run directory removed")
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// handler is the server's /v1 routes.
func (s *Server) handler() http.Handler {
	s.muxOnce.Do(func() {
		mux := http.NewServeMux()
		mux.HandleFunc("/v1/run", s.admitted("POST", "POST /v1/run", s.handleRun))
		mux.HandleFunc("/v1/health", s.handleHealth)
		s.routeSessions(mux)
		mux.Handle("/v1/mcp", s.mcpHandler())
		mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			s.writeError(w, &api.Error{Status: 404, Msg: "no such endpoint: " + r.URL.Path + " (POST /v1/run, /v1/sessions, /v1/mcp, GET /v1/health, /v1/metrics)"})
		})
		s.mux = s.vmRoutes(mux)
	})
	return s.mux
}

// writeError answers e. Every write the server makes has a deadline (this
// one, or ndjson's per line): without it a caller that never reads holds
// its handler, and with it its run slot, for as long as it likes.
func (s *Server) writeError(w http.ResponseWriter, e *api.Error) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	w.Write(marshal(e))
}

// admitPeer says whether the caller may use the server.
func (s *Server) admitPeer(r *http.Request) (peer, *api.Error) {
	p, ok := r.Context().Value(ctxKey{}).(peer)
	if !ok {
		return p, &api.Error{Status: 403, Msg: "caller unknown: no SO_PEERCRED on this connection"}
	}
	if p.tenant != "" {
		return p, nil
	}
	if len(s.cfg.AllowUIDs) == 0 || p.uid == uint32(os.Getuid()) {
		return p, nil
	}
	for _, u := range s.cfg.AllowUIDs {
		if u == p.uid {
			return p, nil
		}
	}
	return p, &api.Error{Status: 403, Msg: fmt.Sprintf("uid %d may not use this server", p.uid)}
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET")
		s.writeError(w, &api.Error{Status: 405, Msg: "GET /v1/health"})
		return
	}
	if _, e := s.admitPeer(r); e != nil {
		s.writeError(w, e)
		return
	}
	h := api.Health{Status: "ok", Version: s.cfg.Version, Pool: map[string]api.PoolStats{}, Host: s.cfg.Facts}
	for _, p := range s.cfg.Profiles {
		h.Profiles = append(h.Profiles, p.Name)
		h.Pool[p.Name] = s.pools[p.Name].Snapshot()
		if vp := s.vmPools[p.Name]; vp != nil {
			h.Pool[p.Name] = vp.Snapshot() // its warm guests
		}
	}
	h.Running, h.Queued = s.gate.Counts()
	if h.Audit = s.cfg.Audit.health(s.cfg.AuditRequired); h.Audit.Failing {
		h.Status = "degraded" // audit says why
	}
	mem, pids := s.budget.Used()
	h.Budget = map[string]int64{"memory_used": mem, "memory_max": s.cfg.BudgetMemory, "pids_used": pids, "pids_max": s.cfg.BudgetPids,
		"body_bytes_used": s.bodies.inUse(), "body_bytes_max": s.cfg.BodyBudget}
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
	w.Header().Set("Content-Type", "application/json")
	w.Write(marshal(h))
}

func (s *Server) profileNames() string {
	var n []string
	for _, p := range s.cfg.Profiles {
		n = append(n, p.Name)
	}
	return strings.Join(n, ", ")
}

// refuseStopped answers a request whose wait was ended by the server
// stopping (or its caller going away, who reads nothing).
func (s *Server) refuseStopped(w http.ResponseWriter, cause error) {
	retryAfter(w, time.Second)
	s.writeError(w, &api.Error{Status: 503, Msg: "shutting down: " + cause.Error()})
}

func retryAfter(w http.ResponseWriter, d time.Duration) {
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int(d.Seconds()+0.999))))
}
