package server

import (
	"fmt"
	"net/http"
	"time"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/server/internal/kernel"
)

// A session's lifecycle past its making: its lifetime moved (POST
// .../ttl, E2B's set_timeout) and its interpreter restarted with /work
// kept (POST .../restart, E2B's restart). Pause, resume and fork are not
// here: they need the interpreter's memory saved and restored (CRIU),
// which a jail without CAP_CHECKPOINT_RESTORE in the host's namespace
// cannot do (docs/server.md says what to do instead).

// handleTTL is POST /v1/sessions/{id}/ttl: the session ends ttl from now,
// ttl at most --session-ttl and the whole life from the session's start
// at most --session-max-life (422 past either). Shorter is allowed too.
func (s *Server) handleTTL(w http.ResponseWriter, r *http.Request, caller peer) {
	var req api.TTLRequest
	ss, done := s.sessionBody(w, r, caller, &req)
	if ss == nil {
		return
	}
	defer done()
	if req.TTL == "" {
		s.writeError(w, badRequest("ttl: missing (\"30m\": the session ends 30 minutes from now)"))
		return
	}
	ttl, err := sessionDuration("ttl", req.TTL, s.cfg.SessionTTL)
	if err != nil {
		s.writeError(w, err.(*api.Error))
		return
	}
	now := time.Now()
	ss.mu.Lock()
	ended := ss.end != nil
	last := ss.created.Add(s.cfg.SessionMaxLife)
	if !ended && !now.Add(ttl).After(last) {
		ss.expires = now.Add(ttl)
		ss.lastUsed = now
	}
	ss.mu.Unlock()
	switch {
	case ended:
		s.writeError(w, ss.goneError())
	case now.Add(ttl).After(last):
		s.writeError(w, &api.Error{Status: 422, Msg: fmt.Sprintf("ttl: %v from now is past the session's longest life of %v from its start, %s (--session-max-life); at most %v from now",
			ttl, s.cfg.SessionMaxLife, last.UTC().Format(time.RFC3339), last.Sub(now).Round(time.Second))})
	default:
		s.writeJSON(w, 200, ss.info())
	}
}

// handleRestart is POST /v1/sessions/{id}/restart: a fresh interpreter
// in the same jail, the session's id, limits, /work and /tmp kept. It
// waits for the exec running, if any, as an exec would (--queue-wait,
// then 409).
func (s *Server) handleRestart(w http.ResponseWriter, r *http.Request, caller peer) {
	ss := s.lookup(w, r, caller)
	if ss == nil {
		return
	}
	if !ss.alive() {
		s.writeError(w, ss.goneError())
		return
	}
	ss.touch()
	wait := time.NewTimer(s.cfg.QueueWait)
	select {
	case ss.slot <- struct{}{}:
		wait.Stop()
	case <-wait.C:
		s.writeError(w, &api.Error{Status: 409, Msg: fmt.Sprintf("session %s is busy: an exec has run for longer than %v (--queue-wait); POST .../interrupt stops it, then restart", ss.id, s.cfg.QueueWait)})
		return
	case <-r.Context().Done():
		wait.Stop()
		return
	}
	defer func() { <-ss.slot }()
	// The restart kills every process of the session: the operator's log
	// has its line before it happens (and none happens without it, under
	// --audit-required).
	if err := s.auditSession("session_restart", ss); err != nil && s.cfg.AuditRequired {
		s.writeError(w, &api.Error{Status: 503, Msg: fmt.Sprintf("the session was not restarted: its audit line could not be written (--audit-required): %v", err)})
		return
	}
	res, ae := ss.restart(s)
	if ae != nil {
		s.writeError(w, ae)
		return
	}
	s.writeJSON(w, 200, res)
}

// restart asks the driver to start over: it kills every other process of
// the jail (kill(-1), from inside its pid namespace: init is spared, the
// jail's init alone survives) and execs the driver's command line again with a fresh
// job, and the fresh driver's first frame must carry the new hello. The
// caller holds the slot. Whatever else comes on the channel meanwhile is
// the jail's code writing to it: the session ends, as an exec's would.
func (ss *session) restart(srv *Server) (*api.RestartResult, *api.Error) {
	ss.useMu.RLock()
	defer ss.useMu.RUnlock()
	if ss.released || !ss.alive() {
		return nil, ss.goneError()
	}
	ss.mu.Lock()
	ss.busy = true
	ss.mu.Unlock()
	defer func() {
		ss.mu.Lock()
		ss.busy, ss.lastUsed = false, time.Now()
		ss.mu.Unlock()
	}()
	t0 := time.Now()
	res := &api.RestartResult{SessionID: ss.id, State: "lost"}
	hello := newID()
	fail := func(why string) (*api.RestartResult, *api.Error) {
		ss.finish(api.SessionFailed, why)
		<-ss.jailDone
		res.Why = why
		res.WallMs = ms(time.Since(t0))
		ss.mu.Lock()
		res.Restarts = ss.restarts
		ss.mu.Unlock()
		res.Session = ss.state()
		return res, nil
	}
	// The driver must still be the program the server started before it
	// is asked to start over: a program a cell exec'd in its place would
	// otherwise answer the restart and have its layout taken as fresh.
	if err := ss.driverIntact(); err != nil {
		return fail("restart: " + err.Error())
	}
	// The inbox opens before the request goes, as an exec's does.
	inbox := ss.openInbox()
	defer ss.closeInbox()
	if err := ss.conn.Send(kernel.Request{Op: "restart", Token: newID(), Hello: hello, SessionEnv: ss.env}, nil, time.Now().Add(srv.helloTimeout())); err != nil {
		return fail(fmt.Sprintf("restart: the driver did not take the request: %v", err))
	}
	deadline := time.NewTimer(srv.helloTimeout())
	defer deadline.Stop()
	select {
	case fr := <-inbox:
		switch {
		case fr.err != nil:
			return fail(fmt.Sprintf("restart: the driver's channel broke (%v)", fr.err))
		case fr.answer.Hello != hello:
			return fail("restart: a frame on the driver's channel that is not the fresh driver's hello: the jail's code wrote to the channel")
		}
		// The hello came from the driver's pid (the channel checks each
		// read's credentials); a fresh interpreter is a new execve, which
		// draws a new layout: the same one means none happened (a driver
		// patched to answer the restart itself), and a forgeable one is
		// refused as at the session's start.
		img, err := kernel.ReadImage(ss.driverPID)
		switch {
		case err != nil:
			return fail(fmt.Sprintf("restart: the fresh driver's process: %v", err))
		case img == ss.image:
			return fail("restart: the driver answered without starting over (its memory layout is unchanged, so no execve happened): the cell's code answered for it")
		case img.Forgeable():
			return fail("restart: the fresh driver drew a memory layout a program exec'd with ASLR off could match; start a new session")
		}
		ss.image = img // the slot is held: no exec reads it meanwhile
		res.Python = fr.answer.Python
		// The fresh driver killed every other process of the jail again
		// before its hello, but that is the jail's word: read from the
		// host that the jail's init and the driver are all that is left.
		// A process a cell's thread forked between the old driver's
		// kill(-1) and its execve would otherwise hold the channel and
		// read the next exec's request, env secrets and all.
		if why := ss.onlyDriverLeft(); why != "" {
			return fail("restart: " + why)
		}
	case <-ss.jailDone:
		e := ss.ended()
		return fail(fmt.Sprintf("restart: the session ended (%s: %s)", e.Verdict, e.Why))
	case <-deadline.C:
		return fail(fmt.Sprintf("restart: the fresh interpreter did not answer within %v", srv.helloTimeout()))
	}
	ss.mu.Lock()
	ss.restarts++
	res.Restarts = ss.restarts
	ss.mu.Unlock()
	res.Restarted, res.State = true, "fresh"
	res.WallMs = ms(time.Since(t0))
	res.Session = ss.state()
	srv.logf("session %s of %s: interpreter restarted (%d)", ss.id[:8], ss.owner, res.Restarts)
	return res, nil
}

// survivorWait is how long a restart waits for the processes the fresh
// driver killed to be gone (SIGKILL is delivered, not waited for; the
// jail's init reaps the orphans) before it calls one a survivor.
const survivorWait = 5 * time.Second

// onlyDriverLeft reads the jail's processes from the host until they are
// its init and the driver alone, and says why not once survivorWait has
// gone by (or the jail cannot be read). The caller holds the slot.
func (ss *session) onlyDriverLeft() string {
	initPID := ss.jl.p.InitPID()
	deadline := time.Now().Add(survivorWait)
	for {
		pids, err := ss.jl.p.Processes()
		if err != nil {
			return fmt.Sprintf("the jail's processes: %v", err)
		}
		var extra []int
		for _, pid := range pids {
			if pid != initPID && pid != ss.driverPID {
				extra = append(extra, pid)
			}
		}
		if len(extra) == 0 {
			return ""
		}
		if len(extra) > 8 {
			extra = extra[:8] // the why is bounded; the pids limit is not
		}
		if time.Now().After(deadline) {
			return fmt.Sprintf("processes other than the fresh driver survived the restart (host pids %v): the cell's code outlived the kill; the session is ended rather than left with them", extra)
		}
		select {
		case <-ss.jailDone:
			return "the jail ended while its processes were read"
		case <-time.After(20 * time.Millisecond):
		}
	}
}
