package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/server/internal/capacity"
	"github.com/stockade/stockade/server/internal/kernel"
	"golang.org/x/sys/unix"
)

// A session is one jail that lives for many requests: one interpreter,
// one namespace of Python state, one cgroup for its whole life and one
// /work. It is born from the pool when the pool has a jail of its limits,
// and never goes back to it: when it ends, its jail is destroyed.

// Timing of a session's parts that no flag sets.
const (
	// helloTimeout bounds a new session's driver from the job to its
	// first frame: an interpreter importing its modules on a busy host.
	helloTimeout = 30 * time.Second
	// interruptGrace is how long an interpreter has to answer a
	// KeyboardInterrupt before its session is killed: a thread blocked in
	// C code (a blocked signal, a sigwait, a read retried on EINTR)
	// never sees it.
	interruptGrace = 2 * time.Second
	// outputGrace is how long an answered exec waits for processes the
	// cell started to close its stdout and stderr.
	outputGrace = 100 * time.Millisecond
	// tombstoneKeep is how long a closed session is remembered, so its
	// owner gets 410 and the reason instead of 404.
	tombstoneKeep = time.Hour
	maxTombstones = 10000
)

// sessionEnd is how and when a session ended.
type sessionEnd struct {
	Verdict api.Verdict
	Why     string
	At      time.Time
}

// session is one live (or ended, and not yet closed) session.
type session struct {
	id, profile string
	owner       capacity.Owner
	ownerPID    int32 // the creating process, for the audit log
	limits      api.SessionLimits
	execTimeout time.Duration // each exec's default and ceiling
	execCPU     time.Duration // each exec's CPU time (0: none)
	outputLimit int64         // per stream per exec
	noNetwork   bool          // the jail has no allowlist: what its refusals are told
	idle        time.Duration
	created     time.Time
	pool        api.PoolUse
	// env is the session's own environment (SessionRequest.Env), which a
	// restarted driver is given again.
	env map[string]string

	jl   *ready
	conn *kernel.Conn
	caps answerCaps // what the server holds of an answer
	proc *jail.Process
	// driverPID and image are the driver's process (the kernel's word, on
	// its first frame) and its memory's layout then: checked again at
	// every answer, so that a program the cell exec'd in its place is
	// never taken for it (internal/kernel/image_linux.go).
	driverPID int
	image     kernel.Image
	// workFD is the server's own descriptor of the session's /work (-1:
	// the profile has none), opened from the jail's: it outlives the
	// jail, so /work stays readable after an OOM kill until the session
	// is released, and no path through /proc names it (a closed fd's
	// number is reused, by another session's /work perhaps).
	workFD int
	// useMu is held (read) by whatever uses the jail or workFD; release
	// takes it (write) to destroy them, and sets released.
	useMu    sync.RWMutex
	released bool

	slot     chan struct{} // held by the exec running: one at a time
	broken   chan struct{} // closed when the channel failed
	jailDone chan struct{} // closed when the jail has ended
	stopJail context.CancelFunc

	mu        sync.Mutex
	lastUsed  time.Time
	busy      bool
	count     int
	end       *sessionEnd
	final     *jail.Result  // the jail's, once it ended
	peakMem   uint64        // the most seen, whatever ResetMemoryPeak did
	interrupt chan struct{} // the running exec's, closed by POST .../interrupt
	// inbox takes the driver's frames for the running exec (nil between
	// execs): room for the two an exec is owed, its started frame and its
	// answer, and no more.
	inbox    chan driverFrame
	expires  time.Time // the janitor's TTL; POST .../ttl moves it
	restarts int       // POST .../restart that brought a fresh driver
}

// inboxFrames is what an exec's inbox holds: a started frame and the answer.
const inboxFrames = 2

type driverFrame struct {
	answer driverAnswer
	err    error
}

// newID is 128 random bits in hex: a session id, an exec's token.
func newID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand does not fail on Linux 3.17+ (getrandom); if it
		// did, an id from nothing would be guessable.
		panic("crypto/rand: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

// finish records the session's end, if it has not ended yet, and kills its
// jail. It reports whether this call ended it.
func (s *session) finish(v api.Verdict, why string) bool {
	s.mu.Lock()
	first := s.end == nil
	if first {
		s.end = &sessionEnd{Verdict: v, Why: why, At: time.Now()}
	}
	s.mu.Unlock()
	s.stopJail()
	return first
}

// alive says whether the session can still run code.
func (s *session) alive() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.end == nil
}

// ended is the session's end, or nil.
func (s *session) ended() *sessionEnd {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.end == nil {
		return nil
	}
	e := *s.end
	return &e
}

// touch restarts the idle clock.
func (s *session) touch() {
	s.mu.Lock()
	s.lastUsed = time.Now()
	s.mu.Unlock()
}

func (s *session) idleExpires() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastUsed.Add(s.idle)
}

// endOf says how a jail that ended by itself ended the session.
func endOf(res *jail.Result) (api.Verdict, string) {
	if kernel.ChannelLost(res) {
		return api.SessionFailed, "the driver's channel broke: the cell closed it, replaced it or wrote to it"
	}
	switch res.Verdict {
	case jail.VerdictMemory:
		return api.SessionMemory, fmt.Sprintf("the kernel OOM-killed the interpreter (the session's memory limit is %d bytes)", limitOr(res.Limits.MemoryBytes))
	case jail.VerdictTimeout:
		return api.SessionTTL, "the session's lifetime ran out"
	case jail.VerdictError:
		msg := "the jail failed"
		if res.Error != nil {
			msg += ": " + *res.Error
		}
		return api.SessionFailed, msg
	case jail.VerdictSignal:
		return api.SessionKilled, fmt.Sprintf("the interpreter died of signal %d", limitOr(res.Signal))
	default:
		return api.SessionKilled, fmt.Sprintf("the interpreter ended (%s, exit status %d)", res.Verdict, res.ExitCode)
	}
}

func limitOr[T int | int64](p *T) T {
	if p == nil {
		return 0
	}
	return *p
}

// watch follows the jail to its end (Start's result comes on done) and the
// driver's channel: a channel that breaks ends the session at once, so
// that nothing the jail's code does to it can leave a session that looks
// alive and answers no more.
func (s *session) watch(srv *Server, done <-chan *jail.Result) {
	select {
	case res := <-done:
		s.jailEnded(res, srv)
		return
	case <-s.broken:
		// The jail's own death breaks the channel too: give its end a
		// moment to be the reason. Longer than an exec's own wait
		// (cell.frame), so that an exec running names the break.
		select {
		case res := <-done:
			s.jailEnded(res, srv)
			return
		case <-time.After(2 * time.Second):
		}
		s.finish(api.SessionFailed, "the driver's channel broke: the jail's code closed it or wrote to it")
	}
	s.jailEnded(<-done, srv)
}

// jailEnded is the jail's end: its result kept, the session's end recorded.
func (s *session) jailEnded(res *jail.Result, srv *Server) {
	s.mu.Lock()
	s.final = res
	if s.end == nil {
		v, why := endOf(res)
		s.end = &sessionEnd{Verdict: v, Why: why, At: time.Now()}
	}
	end := *s.end
	s.mu.Unlock()
	close(s.jailDone)
	srv.metrics.sessionEnded(end.Verdict)
	srv.logf("session %s of %s ended: %s: %s", s.id[:8], s.owner, end.Verdict, end.Why)
}

// readFrames hands the driver's frames to the exec waiting for them,
// until the channel fails or the jail is gone. A frame nobody asked for
// (between execs, or past the two an exec is owed) is the cell's doing:
// it ends the session, and is dropped, never held for a later exec (a
// thread the cell left behind could otherwise park a frame of tens of MiB
// in the server for the session's life).
func (s *session) readFrames() {
	for {
		var f driverFrame
		f.answer, f.err = readAnswer(s.conn, s.caps, time.Time{})
		if f.err != nil {
			close(s.broken)
		}
		s.mu.Lock()
		taken := false
		if s.inbox != nil {
			select {
			case s.inbox <- f:
				taken = true
			default:
			}
		}
		s.mu.Unlock()
		if f.err != nil {
			return // the channel's end: watch ends the session
		}
		if !taken {
			s.finish(api.SessionFailed, "a frame on the driver's channel that no exec asked for: the cell wrote to the channel")
			return
		}
	}
}

// openInbox makes the running exec's inbox; closeInbox drops it, with
// whatever it still holds.
func (s *session) openInbox() chan driverFrame {
	in := make(chan driverFrame, inboxFrames)
	s.mu.Lock()
	s.inbox = in
	s.mu.Unlock()
	return in
}

func (s *session) closeInbox() {
	s.mu.Lock()
	s.inbox = nil
	s.mu.Unlock()
}

// driverIntact says whether the driver's process is still the program the
// server started: the same memory layout (a new execve draws a new one),
// read while its pidfd shows it alive (so the pid was not reused).
func (s *session) driverIntact() error {
	return kernel.Intact(s.driverPID, s.image, func() error { return s.proc.Signal(0) })
}

// release kills the session if it lives, waits for its jail to end and
// for the exec running (if any), then destroys the jail and gives back
// its /work, cgroup and share of the budget. It is called once, by
// whoever takes the session out of the table.
func (s *session) release(srv *Server, v api.Verdict, why string) {
	s.finish(v, why)
	<-s.jailDone
	s.slot <- struct{}{} // the exec running, if any, has returned
	s.useMu.Lock()
	defer s.useMu.Unlock()
	s.released = true
	if s.workFD >= 0 {
		unix.Close(s.workFD)
	}
	s.conn.Close()
	if s.proc != nil {
		s.proc.Close()
	}
	if err := s.jl.close(srv.budget); err != nil {
		srv.closeFailed(err)
	}
}

// accounting is the session's whole use, once its jail has ended.
func (s *session) accounting() api.SessionEnd {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := api.SessionEnd{SessionID: s.id, ExecutionCount: s.count, CreatedAt: s.created,
		BlockedSyscalls: []jail.BlockedSyscall{}, Network: []jail.NetworkDecision{}, PeakMemoryBytes: s.peakMem}
	if s.end != nil {
		e.Verdict, e.Why, e.EndedAt = s.end.Verdict, s.end.Why, s.end.At
		e.WallMs = ms(s.end.At.Sub(s.created))
	}
	if r := s.final; r != nil {
		e.CPUMs, e.PidsPeak, e.WorkPeakBytes = r.CPUMs, r.PidsPeak, r.WorkPeakBytes
		e.PeakMemoryBytes = max(e.PeakMemoryBytes, r.PeakMemoryBytes)
		e.BlockedSyscalls, e.Network = r.BlockedSyscalls, r.Network
	}
	return e
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

// usage reads the live jail, unless it ended or is released.
func (s *session) usage() (jail.Usage, error) {
	s.useMu.RLock()
	defer s.useMu.RUnlock()
	if s.released || !s.alive() {
		return jail.Usage{}, jail.ErrEnded
	}
	u, err := s.jl.p.Usage()
	if err == nil {
		s.mu.Lock()
		s.peakMem = max(s.peakMem, u.MemoryPeakBytes)
		s.mu.Unlock()
	}
	return u, err
}

// info is GET /v1/sessions/{id}.
func (s *session) info() api.SessionInfo {
	u, uerr := s.usage()
	s.mu.Lock()
	defer s.mu.Unlock()
	if uerr != nil {
		u = jail.Usage{}
	}
	in := api.SessionInfo{SessionID: s.id, Profile: s.profile, Alive: s.end == nil, Busy: s.busy,
		ExecutionCount: s.count, Restarts: s.restarts, MemoryBytes: u.MemoryBytes, PeakMemoryBytes: s.peakMem, CPUMs: ms(u.CPU),
		CreatedAt: s.created, LastUsedAt: s.lastUsed, ExpiresAt: s.expires, IdleExpiresAt: s.lastUsed.Add(s.idle),
		Limits: s.limits, Pool: s.pool}
	if s.end != nil {
		at := s.end.At
		in.EndedAt, in.Verdict, in.Why = &at, s.end.Verdict, s.end.Why
		if s.final != nil {
			in.CPUMs = s.final.CPUMs
		}
	}
	return in
}

func (s *session) state() api.SessionState {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := api.SessionState{ID: s.id, Alive: s.end == nil, ExpiresAt: s.expires, IdleExpiresAt: s.lastUsed.Add(s.idle), Limits: s.limits}
	if s.end != nil {
		st.Ended = s.end.Verdict
	}
	return st
}

// goneError is the 410 of a session that ended, with why, and where its
// /work can still be read.
func (s *session) goneError() *api.Error {
	e := s.ended()
	msg := fmt.Sprintf("session %s ended (%s): %s", s.id, e.Verdict, e.Why)
	if s.workFD >= 0 {
		msg += fmt.Sprintf("; its /work stays readable through the files routes until DELETE or %s", s.idleExpires().Format(time.RFC3339))
	}
	return &api.Error{Status: 410, Msg: msg}
}

// tombstone is a closed session, remembered for its owner.
type tombstone struct {
	owner capacity.Owner
	end   sessionEnd
	at    time.Time
}

// sessionTable is every session the server holds, by id.
type sessionTable struct {
	mu      sync.Mutex
	byID    map[string]*session
	held    *capacity.Quota // sessions held and being made: --sessions, --sessions-per-caller
	tombs   map[string]tombstone
	order   []string // tombstones, oldest first
	closing bool
}

func newSessionTable(max, perCaller int) *sessionTable {
	return &sessionTable{byID: map[string]*session{}, held: capacity.NewQuota(max, perCaller), tombs: map[string]tombstone{}}
}

var (
	errSessionsFull   = errors.New("the server holds --sessions sessions")
	errCallerSessions = errors.New("this uid holds --sessions-per-caller sessions")
	errShuttingDown   = errors.New("shutting down")
)

// reserve counts a session about to be made against the caps; unreserve
// or add follows.
func (t *sessionTable) reserve(uid capacity.Owner) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closing {
		return errShuttingDown
	}
	switch t.held.Take(uid) {
	case capacity.ErrUIDQuotaFull:
		return errCallerSessions
	case capacity.ErrQuotaFull:
		return errSessionsFull
	}
	return nil
}

func (t *sessionTable) unreserve(uid capacity.Owner) { t.held.Put(uid) }

// add registers a made session (its reservation becomes it); false when
// shutdown began meanwhile.
func (t *sessionTable) add(s *session) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closing {
		return false
	}
	t.byID[s.id] = s
	return true
}

// get finds uid's session id: the session, or the tombstone of a closed
// one, or neither. Another uid's session is neither: its owner's alone.
func (t *sessionTable) get(id string, uid capacity.Owner) (*session, *tombstone) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s, ok := t.byID[id]; ok && s.owner == uid {
		return s, nil
	}
	if tb, ok := t.tombs[id]; ok && tb.owner == uid {
		return nil, &tb
	}
	return nil, nil
}

// take removes s from the table, leaving a tombstone; false if another
// caller took it first. The caller releases it.
func (t *sessionTable) take(s *session, v api.Verdict, why string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byID[s.id] != s {
		return false
	}
	delete(t.byID, s.id)
	t.held.Put(s.owner)
	end := sessionEnd{Verdict: v, Why: why, At: time.Now()}
	if e := s.ended(); e != nil {
		end = *e
	}
	now := time.Now()
	for len(t.order) > 0 && (len(t.order) >= maxTombstones || now.Sub(t.tombs[t.order[0]].at) > tombstoneKeep) {
		delete(t.tombs, t.order[0])
		t.order = t.order[1:]
	}
	t.tombs[s.id] = tombstone{owner: s.owner, end: end, at: now}
	t.order = append(t.order, s.id)
	return true
}

func (t *sessionTable) list(uid capacity.Owner) []*session {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*session
	for _, s := range t.byID {
		if s.owner == uid {
			out = append(out, s)
		}
	}
	return out
}

func (t *sessionTable) all() []*session {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*session, 0, len(t.byID))
	for _, s := range t.byID {
		out = append(out, s)
	}
	return out
}

func (t *sessionTable) counts() (live, held int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range t.byID {
		held++
		if s.alive() {
			live++
		}
	}
	return live, held
}

// close is the server's shutdown: no session may be made from now on.
func (t *sessionTable) close() {
	t.mu.Lock()
	t.closing = true
	t.mu.Unlock()
}

// janitor ends sessions past their idle timeout or lifetime, and closes
// ended ones past theirs, until ctx ends.
func (srv *Server) janitor(ctx context.Context) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		srv.vmJanitor(now)
		for _, s := range srv.sessions.all() {
			s.mu.Lock()
			idleOver := !s.busy && now.After(s.lastUsed.Add(s.idle))
			ttlOver := now.After(s.expires)
			life := s.expires.Sub(s.created).Round(time.Millisecond)
			alive := s.end == nil
			s.mu.Unlock()
			switch {
			case ttlOver:
				srv.closeSession(s, api.SessionTTL, fmt.Sprintf("its lifetime of %v ran out", life), true)
			case idleOver && alive:
				srv.closeSession(s, api.SessionIdle, fmt.Sprintf("no request for its idle timeout of %v", s.idle), true)
			case idleOver:
				// Ended earlier and kept for its /work: idle too long now.
				srv.closeSession(s, api.SessionIdle, "", true)
			}
		}
	}
}

// closeSession takes s out of the table and releases it (in the
// background when async): the jail killed if alive, everything removed.
func (srv *Server) closeSession(s *session, v api.Verdict, why string, async bool) bool {
	s.finish(v, why) // recorded before the tombstone copies the end
	if !srv.sessions.take(s, v, why) {
		return false
	}
	srv.releasing.Add(1)
	do := func() {
		defer srv.releasing.Done()
		s.release(srv, v, why)
		_ = srv.auditSession("session_end", s)
	}
	if async {
		go do()
	} else {
		do()
	}
	return true
}

// helloTimeout is how long a session's interpreter may take from its job
// to its first answer: Config.SessionStart, else helloTimeout.
func (srv *Server) helloTimeout() time.Duration {
	if srv.cfg.SessionStart > 0 {
		return srv.cfg.SessionStart
	}
	return helloTimeout
}
