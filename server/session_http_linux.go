package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/stockade/stockade/server/internal/capacity"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/server/internal/kernel"
	"golang.org/x/sys/unix"
)

// The session routes. Every one answers only the session's owner (the
// uid SO_PEERCRED gave when it was made): to any other uid a session
// does not exist (404), so ids cannot be probed for.

// routeSessions registers the session routes on mux.
func (s *Server) routeSessions(mux *http.ServeMux) {
	mux.HandleFunc("/v1/sessions", s.admitted("GET, POST", "GET or POST /v1/sessions", s.handleSessions))
	mux.HandleFunc("/v1/sessions/{id}", s.admitted("GET, DELETE", "GET or DELETE /v1/sessions/{id}", s.handleSession))
	mux.HandleFunc("/v1/sessions/{id}/exec", s.admitted("POST", "POST /v1/sessions/{id}/exec", s.handleExec))
	mux.HandleFunc("/v1/sessions/{id}/interrupt", s.admitted("POST", "POST /v1/sessions/{id}/interrupt", s.handleInterrupt))
	mux.HandleFunc("/v1/sessions/{id}/ttl", s.admitted("POST", "POST /v1/sessions/{id}/ttl", s.handleTTL))
	mux.HandleFunc("/v1/sessions/{id}/restart", s.admitted("POST", "POST /v1/sessions/{id}/restart", s.handleRestart))
	mux.HandleFunc("/v1/sessions/{id}/files", s.admitted("GET", "GET /v1/sessions/{id}/files?path=DIR", s.handleFiles))
	mux.HandleFunc("/v1/sessions/{id}/files/{path...}", s.admitted("GET, PUT, DELETE", "GET, PUT or DELETE /v1/sessions/{id}/files/{path}", s.handleFiles))
	mux.HandleFunc("/v1/metrics", s.handleMetrics)
}

func methodNotAllowed(s *Server, w http.ResponseWriter, allow, what string) {
	w.Header().Set("Allow", allow)
	s.writeError(w, &api.Error{Status: 405, Msg: what})
}

// allowed reports whether method is one of allow ("GET, POST"), HEAD
// wherever GET is.
func allowed(method, allow string) bool {
	if method == http.MethodHead {
		method = http.MethodGet
	}
	return slices.Contains(strings.Split(allow, ", "), method)
}

// admitted is the prologue of a route that may use a jail: the methods it
// answers (405 with what otherwise), then admitted unless shutdown began
// (the request is counted in inflight until h returns), from an allowed
// caller.
func (s *Server) admitted(allow, what string, h func(http.ResponseWriter, *http.Request, peer)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !allowed(r.Method, allow) {
			methodNotAllowed(s, w, allow, what)
			return
		}
		if !s.admit() {
			retryAfter(w, time.Second)
			s.writeError(w, &api.Error{Status: 503, Msg: "shutting down: no new requests"})
			return
		}
		defer s.inflight.Done()
		caller, e := s.admitPeer(r)
		if e != nil {
			s.writeError(w, e)
			return
		}
		h(w, r, caller)
	}
}

// admitBody counts the caller against --per-caller and the queue, and
// the body against --body-budget, before the body is read: a body the
// server holds is one these allow. Otherwise it answers (429, 503, 413).
// done gives both back; it must follow true.
func (s *Server) admitBody(w http.ResponseWriter, r *http.Request, caller peer) (done func(), ok bool) {
	switch err := s.gate.Arrive(caller.owner()); {
	case errors.Is(err, capacity.ErrCallerCap):
		retryAfter(w, time.Second)
		s.refuse(w, r, &api.Error{Status: 429, Msg: fmt.Sprintf("uid %d already has %d requests being read, waiting or running", caller.uid, s.cfg.PerCaller)})
		return nil, false
	case errors.Is(err, capacity.ErrBusy):
		retryAfter(w, s.cfg.QueueWait/4)
		s.refuse(w, r, &api.Error{Status: 503, Msg: fmt.Sprintf("busy: %d requests are being read, waiting or running (--concurrency %d + --queue %d)", s.cfg.Concurrency+s.cfg.Queue, s.cfg.Concurrency, s.cfg.Queue)})
		return nil, false
	}
	share, ok := s.takeBodyShare(w, r)
	if !ok {
		s.gate.Depart(caller.owner())
		return nil, false
	}
	return func() {
		s.bodies.give(share)
		s.gate.Depart(caller.owner())
	}, true
}

// lookup finds the caller's session named in the path, or answers 404
// (unknown, or another uid's) or 410 (closed, with why).
func (s *Server) lookup(w http.ResponseWriter, r *http.Request, caller peer) *session {
	ss, e := s.sessionOf(caller, r.PathValue("id"))
	if e != nil {
		s.writeError(w, e)
	}
	return ss
}

// sessionOf finds the caller's session id, or says why not: 404 (unknown,
// or another uid's), 410 (closed, with why).
func (s *Server) sessionOf(caller peer, id string) (*session, *api.Error) {
	ss, tomb := s.sessions.get(id, caller.owner())
	switch {
	case ss != nil:
		return ss, nil
	case tomb != nil:
		return nil, &api.Error{Status: 410, Msg: fmt.Sprintf("session %s ended (%s): %s; it is closed and its /work is gone", id, tomb.end.Verdict, tomb.end.Why)}
	}
	return nil, &api.Error{Status: 404, Msg: fmt.Sprintf("no session %q (GET /v1/sessions lists yours)", id)}
}

// readSessionBody counts the caller against --per-caller and the queue,
// and the body against --body-budget, before reading it, as /v1/run does,
// and decodes it into v. done gives both back; it must follow true.
func (s *Server) readSessionBody(w http.ResponseWriter, r *http.Request, caller peer, v any) (done func(), ok bool) {
	if done, ok = s.admitBody(w, r, caller); !ok {
		return nil, false
	}
	err := checkJSONType(r)
	if err == nil {
		var body []byte
		if body, err = s.readBodyWithin(http.NewResponseController(w), r); err == nil {
			err = decodeJSON(body, v)
		}
	}
	if err != nil {
		done()
		s.refuseBody(w, err)
		return nil, false
	}
	return done, true
}

// sessionBody is readSessionBody for a request to one of the caller's
// sessions: the body admitted, read and decoded into v, then the session
// named by the path found. done gives the admission back; it must follow
// a session.
func (s *Server) sessionBody(w http.ResponseWriter, r *http.Request, caller peer, v any) (*session, func()) {
	done, ok := s.readSessionBody(w, r, caller, v)
	if !ok {
		return nil, nil
	}
	ss := s.lookup(w, r, caller)
	if ss == nil {
		done()
		return nil, nil
	}
	return ss, done
}

// streamOf is the NDJSON writer of a request that asks for its output as
// it comes (Accept: application/x-ndjson), or nil.
func (s *Server) streamOf(w http.ResponseWriter, rc *http.ResponseController, r *http.Request) *ndjson {
	if !strings.Contains(r.Header.Get("Accept"), api.NDJSON) {
		return nil
	}
	return &ndjson{w: w, rc: rc, timeout: s.cfg.WriteTimeout}
}

// bodyRefusal is the answer to a body that could not be read.
func (s *Server) bodyRefusal(err error) *api.Error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return &api.Error{Status: 408, Msg: fmt.Sprintf("request body not received within %v", s.cfg.BodyTimeout)}
	}
	var ae *api.Error
	if errors.As(err, &ae) {
		return ae
	}
	return badRequest("%v", err)
}

func (s *Server) writeJSON(w http.ResponseWriter, status int, v any) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(marshal(v))
}

// handleSessions is POST /v1/sessions (make one) and GET /v1/sessions.
func (s *Server) handleSessions(w http.ResponseWriter, r *http.Request, caller peer) {
	if r.Method != http.MethodPost {
		list := []api.SessionInfo{}
		for _, ss := range s.sessions.list(caller.owner()) {
			list = append(list, ss.info())
		}
		list = append(list, s.vmList(r.Context(), caller)...)
		s.writeJSON(w, 200, api.SessionList{Sessions: list})
		return
	}
	var req api.SessionRequest
	done, ok := s.readSessionBody(w, r, caller, &req)
	if !ok {
		return
	}
	defer done()
	created, e := s.createSession(r.Context(), caller, &req)
	if e != nil {
		if e.Status == 503 || e.Status == 429 {
			retryAfter(w, time.Second)
		}
		s.writeError(w, e)
		return
	}
	s.writeJSON(w, 201, created)
}

// sessionLimitsOf is what a session runs under.
func sessionLimitsOf(spec jail.Spec, idle, ttl time.Duration) api.SessionLimits {
	return api.SessionLimits{TimeoutMs: jail.LimitMs(spec.Timeout), CPUTimeMs: jail.LimitMs(spec.Cgroup.CPUTime),
		OutputBytes: spec.OutputLimit, MemoryBytes: spec.Cgroup.MemoryMax, SwapBytes: spec.Cgroup.SwapMax,
		CPUs: spec.Cgroup.CPUs, Pids: spec.Cgroup.PidsMax, WorkBytes: spec.WorkSize,
		IdleTimeoutMs: jail.LimitMs(idle), TTLMs: jail.LimitMs(ttl), Seccomp: spec.Seccomp}
}

// createSession makes a session: its limits through the one door /v1/run
// uses (applyLimits), a jail from the pool when it has one of those
// limits, the driver started and its first frame read.
func (s *Server) createSession(ctx context.Context, caller peer, req *api.SessionRequest) (*api.SessionCreated, *api.Error) {
	admitted := time.Now()
	if err := checkFiles(req.Files, 1024); err != nil {
		return nil, err.(*api.Error)
	}
	if err := checkEnv(req.Env); err != nil {
		return nil, err.(*api.Error)
	}
	name := req.Profile
	if name == "" {
		name = s.cfg.Profiles[0].Name
	}
	if _, ok := s.policies[name]; !ok {
		return nil, badRequest("profile %q: not offered by this server (it offers: %s)", name, s.profileNames())
	}
	if len(req.Files) > 0 && s.specs[name].WorkdirMode == jail.WorkdirNone {
		return nil, badRequest("files: profile %s has no writable /work", name)
	}
	// The one door a request's limits go through, as /v1/run's do, over
	// the profile as sessions have it (--session-timeout and the like).
	spec, err := s.sessionRequestSpec(name, req.Limits)
	if err != nil {
		var ae *api.Error
		if errors.As(err, &ae) {
			return nil, ae
		}
		return nil, badRequest("%v", err)
	}
	idle, err := sessionDuration("idle_timeout", req.IdleTimeout, s.cfg.SessionIdle)
	if err != nil {
		return nil, err.(*api.Error)
	}
	ttl, err := sessionDuration("ttl", req.TTL, s.cfg.SessionTTL)
	if err != nil {
		return nil, err.(*api.Error)
	}
	if s.isVM(name) {
		return s.createVMSession(ctx, caller, name, spec, idle, ttl, req)
	}
	if e := s.reserveSession(caller); e != nil {
		return nil, e
	}
	reserved := true
	defer func() {
		if reserved {
			s.sessions.unreserve(caller.owner())
		}
	}()
	// The jail is the session's whole life: the profile's CPU time is each
	// exec's, which the server applies, not the jail's, which would count
	// every exec's CPU (and the interpreter's RLIMIT_CPU with it).
	jailSpec := spec
	jailSpec.Cgroup.CPUTime = 0
	jailSpec.OutputLimit = s.specs[name].OutputLimit
	var ss *session
	var use api.PoolUse
	for attempt := 1; ; attempt++ {
		switch err := s.gate.Enter(ctx); {
		case errors.Is(err, capacity.ErrBusy):
			return nil, &api.Error{Status: 503, Msg: fmt.Sprintf("busy: %d runs at once and the queue is full or waited %v", s.cfg.Concurrency, s.cfg.QueueWait)}
		case err != nil:
			return nil, &api.Error{Status: 499, Msg: "the caller went away"}
		}
		jl, u, ae := s.sessionJail(ctx, name, jailSpec, admitted)
		s.gate.Leave()
		if ae != nil {
			return nil, ae
		}
		use = u
		ss, ae = s.startSession(jl, caller, name, spec, jailSpec, idle, ttl, req, use)
		if ae == errForgeableDriver && attempt < 3 {
			continue // about one jail in 1,000; three in a row, one in 10^9
		}
		if ae != nil {
			return nil, ae
		}
		break
	}
	if !s.sessions.add(ss) {
		ss.release(s, api.SessionShutdown, "the server is stopping")
		return nil, &api.Error{Status: 503, Msg: "shutting down: no new sessions"}
	}
	reserved = false
	s.metrics.sessionCreated(use.Hit, time.Since(admitted))
	if err := s.auditSession("session_start", ss); err != nil && s.cfg.AuditRequired {
		s.closeSession(ss, api.SessionFailed, "its audit line could not be written (--audit-required)", false)
		return nil, &api.Error{Status: 503, Msg: fmt.Sprintf("the session was not started: its audit line could not be written (--audit-required): %v", err)}
	}
	st := ss.state()
	return &api.SessionCreated{SessionID: ss.id, Profile: name, Limits: ss.limits, CreatedAt: ss.created,
		ExpiresAt: st.ExpiresAt, IdleExpiresAt: st.IdleExpiresAt, Pool: use}, nil
}

// sessionJail takes a jail for a session: from the pool when its jails
// have the session's limits, else made for it.
func (s *Server) sessionJail(ctx context.Context, profile string, spec jail.Spec, admitted time.Time) (*ready, api.PoolUse, *api.Error) {
	use := api.PoolUse{}
	pl := s.pools[profile]
	var jl *ready
	switch {
	case pl.Spec().Cgroup.CPUTime > 0 && poolServes(pl.Spec(), withCPUTime(spec, pl.Spec().Cgroup.CPUTime)):
		use.Reason = "the profile's CPU-time limit is each exec's in a session, and its pooled jails carry it for their whole life"
	case !poolServes(pl.Spec(), spec):
		use.Reason = "limits differ from the profile's"
	default:
		jl, use = usePool(pl)
	}
	if jl == nil {
		var err error
		jl, err = s.coldJail(ctx, spec)
		if err != nil {
			var ae *api.Error
			if errors.As(err, &ae) {
				return nil, use, ae
			}
			return nil, use, &api.Error{Status: 500, Msg: "set up the session's jail: " + err.Error()}
		}
	}
	use.WaitedMs = ms(time.Since(admitted))
	return jl, use, nil
}

func withCPUTime(spec jail.Spec, d time.Duration) jail.Spec {
	spec.Cgroup.CPUTime = d
	return spec
}

// startSession turns a prepared jail into a session: the jail started for
// the session's lifetime, its driver sent the session's job, the
// driver's first frame read (which names its process, by the kernel's
// credentials), the files written. On failure the jail is destroyed.
func (s *Server) startSession(jl *ready, caller peer, profile string, spec, jailSpec jail.Spec, idle, ttl time.Duration, req *api.SessionRequest, use api.PoolUse) (*session, *api.Error) {
	fail := func(msg string, err error) *api.Error {
		return &api.Error{Status: 500, Msg: fmt.Sprintf("start the session: %s: %v", msg, err)}
	}
	maxFrame, caps := s.answerBounds(spec.OutputLimit)
	conn, err := kernel.NewConn(jl.driver, maxFrame)
	if err != nil {
		if cerr := jl.close(s.budget); cerr != nil {
			s.closeFailed(cerr)
		}
		return nil, fail("driver channel", err)
	}
	now := time.Now()
	ctx, stopJail := context.WithCancel(context.Background())
	ss := &session{id: newID(), profile: profile, owner: caller.owner(), ownerPID: caller.pid, limits: sessionLimitsOf(spec, idle, ttl),
		execTimeout: spec.Timeout, execCPU: spec.Cgroup.CPUTime, outputLimit: spec.OutputLimit, noNetwork: !spec.Network.Enabled(), idle: idle,
		created: now, expires: now.Add(ttl), env: req.Env, pool: use, jl: jl, conn: conn, caps: caps, workFD: -1, lastUsed: now,
		slot: make(chan struct{}, 1), broken: make(chan struct{}),
		jailDone: make(chan struct{}), stopJail: stopJail}
	hello := newID()
	// The session's stdin is /dev/null: the cells get their own.
	jl.stdin.Close()
	done := make(chan *jail.Result, 1)
	go func() {
		// The jail's own clock is a backstop: the janitor ends the session
		// at its lifetime, which POST .../ttl may move up to
		// --session-max-life from its start.
		res, _ := jl.p.Start(ctx, jail.StartOptions{Lifetime: s.cfg.SessionMaxLife + time.Second, Stdout: io.Discard, Stderr: io.Discard})
		done <- res
	}()
	abort := func(e *api.Error) (*session, *api.Error) {
		ss.finish(api.SessionFailed, e.Msg)
		res := <-done
		ss.final = res
		close(ss.jailDone)
		ss.slot <- struct{}{}
		ss.useMu.Lock()
		ss.released = true
		if ss.workFD >= 0 {
			unix.Close(ss.workFD)
		}
		ss.useMu.Unlock()
		conn.Close()
		if ss.proc != nil {
			ss.proc.Close()
		}
		if err := jl.close(s.budget); err != nil {
			s.closeFailed(err)
		}
		return nil, e
	}
	if err := conn.Send(kernel.Session{Op: "session", Hello: hello, Env: req.Env}, nil, time.Now().Add(s.helloTimeout())); err != nil {
		return abort(fail("the driver did not take the job", err))
	}
	var h kernel.Hello
	if err := conn.ReadFrame(&h, time.Now().Add(s.helloTimeout())); err != nil || h.Hello != hello {
		if err == nil {
			err = errors.New("its first frame is not the hello sent")
		}
		return abort(fail("the driver did not start", err))
	}
	cred := conn.Cred()
	if cred == nil {
		return abort(fail("the driver's first frame", errors.New("came without the kernel's credentials")))
	}
	proc, err := jl.p.OpenProcess(int(cred.Pid))
	if err != nil {
		return abort(fail("the driver's process", err))
	}
	ss.proc = proc
	// The layout execve gave the driver, measured now that the pidfd pins
	// its pid: every answer is checked against it.
	ss.driverPID = int(cred.Pid)
	if ss.image, err = kernel.ReadImage(ss.driverPID); err != nil {
		return abort(fail("the driver's process", err))
	}
	if ss.image.Forgeable() {
		if !kernel.ASLROff(ss.driverPID) {
			// A draw a program exec'd with ASLR off could match: this
			// jail is not handed out (internal/kernel/image_linux.go).
			return abort(errForgeableDriver)
		}
		if s.aslrWarned.CompareAndSwap(false, true) {
			s.logf("ASLR is off (kernel.randomize_va_space = 0, or ADDR_NO_RANDOMIZE in the server's personality): a cell that execs a program in its driver's place keeps the same memory layout, and sessions cannot tell it (docs/security.md)")
		}
	}
	if ss.workFD, err = openWorkRoot(jl.p.Workdir()); err != nil {
		return abort(fail("/work", err))
	}
	if len(req.Files) > 0 {
		uid, gid := jl.p.WorkOwner()
		for p, b64 := range req.Files {
			data, _ := base64.StdEncoding.DecodeString(b64)
			if _, err := writeWorkFile(ss.workFD, p, bytes.NewReader(data), uid, gid); err != nil {
				return abort(workError("files: "+p, err))
			}
		}
	}
	go ss.readFrames()
	go ss.watch(s, done)
	return ss, nil
}

// errForgeableDriver is a driver whose memory layout a program exec'd in
// its place could match (internal/kernel/image_linux.go): its jail is destroyed and
// the session made in another.
var errForgeableDriver = &api.Error{Status: 503, Msg: "start the session: three drivers in a row drew a memory layout a cell could forge; try again"}

// handleSession is GET and DELETE /v1/sessions/{id}.
func (s *Server) handleSession(w http.ResponseWriter, r *http.Request, caller peer) {
	ss := s.lookup(w, r, caller)
	if ss == nil {
		return
	}
	if r.Method != http.MethodDelete {
		ss.touch()
		s.writeJSON(w, 200, ss.info())
		return
	}
	end, e := s.endSession(caller, ss)
	if e != nil {
		s.writeError(w, e)
		return
	}
	s.writeJSON(w, 200, end)
}

// endSession closes the caller's session and returns its accounting.
func (s *Server) endSession(caller peer, ss *session) (*api.SessionEnd, *api.Error) {
	if !s.closeSession(ss, api.SessionClosed, "closed by DELETE", false) {
		// Another request closed it first: its tombstone answers.
		_, e := s.sessionOf(caller, ss.id)
		return nil, e
	}
	end := ss.accounting()
	return &end, nil
}

// handleExec is POST /v1/sessions/{id}/exec.
func (s *Server) handleExec(w http.ResponseWriter, r *http.Request, caller peer) {
	var req api.ExecRequest
	ss, done := s.sessionBody(w, r, caller, &req)
	if ss == nil {
		return
	}
	defer done()
	// The exec's context ends when its caller closes the connection (not
	// at a half-close) or the server kills the runs: an interrupt.
	ctx, stopRun := s.runContext(r)
	defer stopRun()
	out := s.streamOf(w, http.NewResponseController(w), r)
	res, ae := s.execCell(ctx, caller, ss, &req, out)
	if ae != nil {
		// Before the exec began: no stream has started.
		s.writeError(w, ae)
		return
	}
	if out != nil {
		res.Type = api.StreamResult
		out.last(marshal(res))
		return
	}
	s.writeJSON(w, 200, res)
}

// execCell checks an exec of the caller's session ss and runs it, once
// the session's previous exec is done. out, when not nil, is given the
// output as it comes; its stream begins with the exec. An error is an
// exec that did not begin.
func (s *Server) execCell(ctx context.Context, caller peer, ss *session, req *api.ExecRequest, out *ndjson) (*api.ExecResult, *api.Error) {
	if req.Code == nil {
		return nil, badRequest("code: missing")
	}
	if err := checkFiles(req.Files, 1024); err != nil {
		return nil, err.(*api.Error)
	}
	if err := checkFigureFormats(req.FigureFormats); err != nil {
		return nil, err.(*api.Error)
	}
	if err := checkExecEnv(req.Env); err != nil {
		return nil, err.(*api.Error)
	}
	timeout, err := execTimeout(req.Timeout, ss.execTimeout)
	if err != nil {
		return nil, err.(*api.Error)
	}
	ss.touch()
	// One exec at a time: the next waits no longer than a queued run.
	wait := time.NewTimer(s.cfg.QueueWait)
	select {
	case ss.slot <- struct{}{}:
		wait.Stop()
	case <-wait.C:
		return nil, &api.Error{Status: 409, Msg: fmt.Sprintf("session %s is busy: an exec has run for longer than %v (--queue-wait); POST .../interrupt stops it", ss.id, s.cfg.QueueWait)}
	case <-ctx.Done():
		wait.Stop()
		return nil, &api.Error{Status: 499, Msg: "the caller went away"}
	}
	defer func() { <-ss.slot }()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if out != nil {
		// Past the exec's timeout and its grace no streamed write may
		// wait: the cell's output must drain for the exec to end.
		out.cancel, out.end = cancel, time.Now().Add(timeout+interruptGrace+time.Second)
	}
	t0 := time.Now()
	res, ae := ss.exec(ctx, s, execPlan{code: *req.Code, stdin: req.Stdin, timeout: timeout, files: req.Files, figureFormats: req.FigureFormats, env: req.Env, caller: caller}, out)
	if ae != nil {
		return nil, ae
	}
	s.metrics.exec(res.Verdict, time.Since(t0))
	s.auditExecEnd(caller, ss, req, timeout, res)
	return res, nil
}

// handleInterrupt is POST /v1/sessions/{id}/interrupt: KeyboardInterrupt
// in the running exec (202), 409 when none runs.
func (s *Server) handleInterrupt(w http.ResponseWriter, r *http.Request, caller peer) {
	ss := s.lookup(w, r, caller)
	if ss == nil {
		return
	}
	if e := ss.interruptExec(); e != nil {
		s.writeError(w, e)
		return
	}
	s.writeJSON(w, 202, api.Interrupting{Status: "interrupting"})
}

// interruptExec raises KeyboardInterrupt in the running exec, or says why
// not: the session ended, or runs none (409).
func (ss *session) interruptExec() *api.Error {
	if !ss.alive() {
		return ss.goneError()
	}
	ss.mu.Lock()
	busy := ss.busy
	if ss.interrupt != nil {
		close(ss.interrupt)
		ss.interrupt = nil
	}
	ss.lastUsed = time.Now()
	ss.mu.Unlock()
	if !busy {
		return &api.Error{Status: 409, Msg: fmt.Sprintf("session %s is idle: no exec to interrupt", ss.id)}
	}
	return nil
}

// handleFiles is GET, PUT and DELETE /v1/sessions/{id}/files/{path}, and
// GET /v1/sessions/{id}/files?path=DIR.
func (s *Server) handleFiles(w http.ResponseWriter, r *http.Request, caller peer) {
	p := r.PathValue("path")
	listing := r.Pattern == "/v1/sessions/{id}/files"
	ss := s.lookup(w, r, caller)
	if ss == nil {
		return
	}
	ss.touch()
	if listing {
		p = workPathOf(r.URL.Query().Get("path"))
		if p != "." {
			if err := checkWorkPath(p); err != nil {
				s.writeError(w, err.(*api.Error))
				return
			}
		}
	} else if err := checkWorkPath(p); err != nil {
		s.writeError(w, err.(*api.Error))
		return
	}
	unlock, e := ss.work(r.Method == http.MethodPut || r.Method == http.MethodDelete)
	if e != nil {
		s.writeError(w, e)
		return
	}
	defer unlock()
	switch {
	case listing:
		list, err := listWork(ss.workFD, p, 10000)
		if err != nil {
			s.writeError(w, workError(p, err))
			return
		}
		s.writeJSON(w, 200, list)
	case r.Method == http.MethodPut:
		s.putFile(w, r, caller, ss, p)
	case r.Method == http.MethodDelete:
		uid, gid := ss.jl.p.WorkOwner()
		if err := removeWork(ss.workFD, p, uid, gid); err != nil {
			s.writeError(w, workError(p, err))
			return
		}
		s.writeJSON(w, 200, api.FileDeleted{Deleted: p})
	default:
		f, size, err := openWorkFile(ss.workFD, p)
		if err != nil {
			if errors.Is(err, errIsDir) || errors.Is(err, errNotRegular) {
				s.writeError(w, badRequest("%s: %v", p, err))
				return
			}
			s.writeError(w, workError(p, err))
			return
		}
		defer f.Close()
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout + time.Duration(size/(1<<20))*time.Second))
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", fmt.Sprint(size))
		w.WriteHeader(200)
		if r.Method != http.MethodHead {
			// The jail may change the file meanwhile: exactly size bytes
			// are sent, or the connection ends short.
			_, _ = io.CopyN(w, f, size)
		}
	}
}

// work holds the session's /work (workFD) for one use of the files
// routes, or says why it cannot: the session released it, its profile has
// none, or (writes) its jail is gone. unlock must follow nil.
func (ss *session) work(writes bool) (unlock func(), e *api.Error) {
	ss.useMu.RLock()
	switch {
	case ss.released:
		e = ss.goneError()
	case ss.workFD < 0:
		e = badRequest("profile %s has no writable /work", ss.profile)
	case writes && !ss.alive():
		// Kept for reading its /work: the jail that owned it is gone.
		e = ss.goneError()
	}
	if e != nil {
		ss.useMu.RUnlock()
		return nil, e
	}
	return ss.useMu.RUnlock, nil
}

// putFile writes the body to p in the session's /work.
func (s *Server) putFile(w http.ResponseWriter, r *http.Request, caller peer, ss *session, p string) {
	// The body streams to /work: the server holds a chunk of it, but its
	// share of --body-budget is taken as any body's is.
	done, ok := s.admitBody(w, r, caller)
	if !ok {
		return
	}
	defer done()
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout))
	uid, gid := ss.jl.p.WorkOwner()
	n, err := writeWorkFile(ss.workFD, p, http.MaxBytesReader(w, r.Body, s.cfg.MaxBody), uid, gid)
	_ = rc.SetReadDeadline(time.Time{})
	if err != nil {
		// Some of the body may be unread (a refused path, a stall, too
		// large): the answer says the connection closes, and
		// endUnreadBodies sees that it does.
		w.Header().Set("Connection", "close")
		var tooBig *http.MaxBytesError
		var ne net.Error
		switch {
		case errors.As(err, &tooBig):
			s.writeError(w, &api.Error{Status: 413, Msg: fmt.Sprintf("request body larger than %d bytes", tooBig.Limit)})
		case errors.As(err, &ne) && ne.Timeout():
			s.writeError(w, &api.Error{Status: 408, Msg: fmt.Sprintf("request body not received within %v", s.cfg.BodyTimeout)})
		default:
			s.writeError(w, workError(p, err))
		}
		return
	}
	s.writeJSON(w, 201, api.FileWritten{Path: p, Bytes: n})
}

// handleMetrics is GET /v1/metrics.
func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(s, w, "GET", "GET /v1/metrics")
		return
	}
	if _, e := s.admitPeer(r); e != nil {
		s.writeError(w, e)
		return
	}
	var b bytes.Buffer
	if err := s.writeMetrics(&b); err != nil {
		s.writeError(w, &api.Error{Status: 500, Msg: err.Error()})
		return
	}
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Write(b.Bytes())
}

// execAudit is an exec's audit line, before its outcome.
func execAudit(event string, caller peer, ss *session, code string, files, n int, timeout time.Duration) AuditEntry {
	h := sha256.New()
	hashString(h, code)
	l := ss.limits
	return AuditEntry{Event: event, RunID: fmt.Sprintf("%s/%d", ss.id, n), SessionID: ss.id, Time: time.Now().UTC(),
		UID: caller.uid, PID: caller.pid, Tenant: caller.tenant, Profile: ss.profile, CodeSHA256: hex.EncodeToString(h.Sum(nil)), CodeBytes: len(code),
		Files: files, Limits: AuditLimits{TimeoutMs: jail.LimitMs(timeout), CPUTimeMs: l.CPUTimeMs, MemoryBytes: l.MemoryBytes,
			CPUs: l.CPUs, Pids: l.Pids, OutputLimit: l.OutputBytes, Seccomp: l.Seccomp}, Pool: ss.pool}
}

// auditExecEnd writes an exec's end line, with its outcome.
func (s *Server) auditExecEnd(caller peer, ss *session, req *api.ExecRequest, timeout time.Duration, res *api.ExecResult) {
	e := execAudit("exec_end", caller, ss, *req.Code, len(req.Files), res.ExecutionCount, timeout)
	o := &AuditOutcome{Verdict: res.Verdict, State: res.State, WallMs: res.WallMs, Blocked: res.BlockedSyscalls}
	if res.Why != "" && res.Verdict != api.ExecOutput {
		why := res.Why
		o.Error = &why
	}
	e.AuditOutcome = o
	_ = s.writeAudit(e)
}

// auditSession writes a session's start or end line.
func (s *Server) auditSession(event string, ss *session) error {
	l := ss.limits
	e := AuditEntry{Event: event, RunID: ss.id, SessionID: ss.id, Time: time.Now().UTC(), UID: ss.owner.UID, PID: ss.ownerPID, Tenant: ss.owner.Tenant,
		Profile: ss.profile, Limits: AuditLimits{TimeoutMs: l.TimeoutMs, CPUTimeMs: l.CPUTimeMs, MemoryBytes: l.MemoryBytes,
			CPUs: l.CPUs, Pids: l.Pids, OutputLimit: l.OutputBytes, Seccomp: l.Seccomp}, Pool: ss.pool}
	if event == "session_end" {
		a := ss.accounting()
		why := a.Why
		e.AuditOutcome = &AuditOutcome{Verdict: a.Verdict, WallMs: a.WallMs, Blocked: a.BlockedSyscalls, Error: &why}
	}
	return s.writeAudit(e)
}

// reserveSession holds a place for caller's new session (a jail's or a
// guest's), or says why there is none.
func (s *Server) reserveSession(caller peer) *api.Error {
	switch err := s.sessions.reserve(caller.owner()); {
	case errors.Is(err, errCallerSessions):
		return &api.Error{Status: 429, Msg: fmt.Sprintf("uid %d already holds %d sessions (--sessions-per-caller): DELETE one", caller.uid, s.cfg.SessionsPerCaller)}
	case errors.Is(err, errSessionsFull):
		return &api.Error{Status: 503, Msg: fmt.Sprintf("busy: the server holds %d sessions (--sessions)", s.cfg.Sessions)}
	case err != nil:
		return &api.Error{Status: 503, Msg: "shutting down: no new sessions"}
	}
	return nil
}
