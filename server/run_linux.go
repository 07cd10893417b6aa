package server

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/stockade/stockade/server/internal/capacity"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/internal/httpbody"
	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/server/internal/kernel"
)

// handleRun is POST /v1/run (s.admitted lets it in).
func (s *Server) handleRun(w http.ResponseWriter, r *http.Request, caller peer) {
	done, ok := s.admitBody(w, r, caller)
	if !ok {
		return
	}
	defer done()
	rc := http.NewResponseController(w)
	req, spec, cold, err := s.parse(rc, r)
	if err != nil {
		s.refuseBody(w, err)
		return
	}
	// From here the request's context ends when its caller closes the
	// connection or the server kills the runs, and not at a half-close.
	ctx, stopRun := s.runContext(r)
	defer stopRun()
	r = r.WithContext(ctx)
	if err := s.gate.Enter(r.Context()); err != nil {
		retry := time.Second
		if errors.Is(err, capacity.ErrBusy) {
			retry = s.cfg.QueueWait / 4
		}
		retryAfter(w, retry)
		s.writeError(w, s.gateRefusal(r.Context(), err))
		return
	}
	defer s.gate.Leave()
	out := s.streamOf(w, rc, r)
	var resp *api.RunResponse
	var e *api.Error
	if s.isVM(req.Profile) {
		resp, e = s.runVM(r.Context(), req, spec)
	} else {
		resp, e = s.run(r.Context(), caller, req, spec, cold, out)
	}
	if e != nil {
		retryAfter(w, time.Second)
		s.writeError(w, e)
		return
	}
	if out != nil {
		resp.Type = api.StreamResult
		out.last(marshal(resp))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if resp.Verdict == jail.VerdictError {
		w.WriteHeader(500) // the server could not set up the jail
	}
	// A caller that does not read its response holds a run slot until
	// this deadline, not for ever.
	_ = rc.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
	// Not flushed here: net/http sends it as the handler returns, once
	// the run slot, the caller's count and the body's share are given
	// back, so that a caller's next request never finds them still held.
	w.Write(marshal(resp))
}

// gateRefusal is the answer to a request the gate did not let run: the
// queue was full or waited too long, or the server is stopping (or the
// caller went away, and reads nothing).
func (s *Server) gateRefusal(ctx context.Context, err error) *api.Error {
	if errors.Is(err, capacity.ErrBusy) {
		return &api.Error{Status: 503, Msg: fmt.Sprintf("busy: %d runs at once and the queue is full or waited %v", s.cfg.Concurrency, s.cfg.QueueWait)}
	}
	return &api.Error{Status: 503, Msg: "shutting down: " + context.Cause(ctx).Error()}
}

// checkJSONType refuses a body that says it is not JSON (415).
func checkJSONType(r *http.Request) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") && ct != "application/x-www-form-urlencoded" {
		return &api.Error{Status: 415, Msg: "Content-Type " + ct + ": send application/json"}
	}
	return nil
}

// readBodyWithin reads the request's body whole, within --body-timeout
// (a body trickled in or stalled holds its memory and its caller's count)
// and --max-body. The connection's read deadline is lifted after: it
// would cancel a run longer than the body's deadline.
func (s *Server) readBodyWithin(rc *http.ResponseController, r *http.Request) ([]byte, error) {
	b, err := httpbody.ReadWithin(rc, r, s.cfg.MaxBody, s.cfg.BodyTimeout)
	if err != nil {
		return nil, unreadBody{bodyError(err, r.ContentLength, s.cfg.MaxBody)}
	}
	return b, nil
}

// refuse answers a request that will not be read. A client that sends its
// whole body before reading the answer would see a broken pipe instead of
// the refusal; so the body is read into nothing first (never held),
// bounded by --max-body and the body's deadline.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, e *api.Error) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout))
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, s.cfg.MaxBody))
	s.writeError(w, e)
}

// parse reads and checks the request and makes its jail's spec.
func (s *Server) parse(rc *http.ResponseController, r *http.Request) (*runRequest, jail.Spec, bool, error) {
	if err := checkJSONType(r); err != nil {
		return nil, jail.Spec{}, false, err
	}
	body, err := s.readBodyWithin(rc, r)
	if err != nil {
		return nil, jail.Spec{}, false, err
	}
	wire, err := decodeRequest(body)
	if err != nil {
		return nil, jail.Spec{}, false, err
	}
	req := &runRequest{RunRequest: wire}
	spec, cold, err := s.checkRun(req)
	return req, spec, cold, err
}

// checkRun checks a decoded request and makes its jail's spec; cold says
// the pool's jails do not fit it.
func (s *Server) checkRun(req *runRequest) (jail.Spec, bool, error) {
	var spec jail.Spec
	if err := req.validate(1024); err != nil {
		return spec, false, err
	}
	name := req.Profile
	if name == "" {
		name = s.cfg.Profiles[0].Name
	}
	if _, ok := s.policies[name]; !ok {
		return spec, false, badRequest("profile %q: not offered by this server (it offers: %s)", name, s.profileNames())
	}
	req.Profile = name
	if len(req.Files) > 0 && s.specs[name].WorkdirMode == jail.WorkdirNone {
		return spec, false, badRequest("files: profile %s has no writable /work", name)
	}
	spec, err := s.requestSpec(name, req.Limits)
	if err != nil {
		return spec, false, err
	}
	return spec, !poolServes(s.specs[name], spec), nil
}

// run serves one admitted request that holds a run slot: a jail from the
// pool (or a fresh one), the job fed to it, the result, the files, and
// the jail destroyed. out, when not nil, is given the output as it comes;
// its stream begins once the jail is the run's. An error is a request
// refused before that (503: no jail in time, the server stopping, the
// audit line unwritten).
func (s *Server) run(ctx context.Context, caller peer, req *runRequest, spec jail.Spec, cold bool, out *ndjson) (*api.RunResponse, *api.Error) {
	admitted := time.Now()
	use := api.PoolUse{Reason: "limits differ from the profile's"}
	var jl *ready
	if !cold {
		jl, use = usePool(s.pools[req.Profile])
	}
	var res *jail.Result
	if jl == nil {
		var err error
		jl, err = s.coldJail(ctx, spec)
		if cause := context.Cause(ctx); err != nil && cause != nil {
			return nil, &api.Error{Status: 503, Msg: "shutting down: " + cause.Error()}
		}
		if err != nil {
			var ae *api.Error
			if errors.As(err, &ae) {
				return nil, ae
			}
			res = jail.FailedResult(spec, err)
		}
	}
	// The jail, its cgroup, budget share and run directory go in the
	// background, started as the answer goes out: the run ended at the
	// payload's exit (jail.StartOptions.AtExit), and the kernel's teardown
	// of the jail after it is not the caller's wait. Shutdown waits for it.
	defer func() { s.teardown(jl) }()
	use.WaitedMs = float64(time.Since(admitted).Microseconds()) / 1e3
	id := s.runID()
	if res == nil {
		if e := s.auditStart(id, caller, req.RunRequest, spec, use); e != nil {
			return nil, e
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if out != nil {
		// Past the run's own timeout no streamed write may wait: the jail
		// is killed by then, and its output must drain for it to be reaped.
		out.cancel, out.end = cancel, time.Now().Add(spec.Timeout+time.Second)
		out.begin()
	}
	if res == nil {
		res = s.start(ctx, jl, req, spec, out)
	}
	res.StockadeVersion = s.cfg.Version
	res.Stderr = withNetworkNotices(res.Stderr, res.Network, !spec.Network.Enabled(), out)
	resp := &api.RunResponse{Result: res, Files: map[string]string{}, Images: []api.Image{}, Results: []api.RichResult{}, FilesSkipped: []string{}, Pool: use}
	if jl != nil && res.Verdict != jail.VerdictError {
		c, err := collectWork(jl.p.Workdir(), req.inputs, collectLimits{MaxBytes: s.cfg.FilesMax, MaxFiles: 1000, MaxDepth: 32,
			MaxEntries: 10000, MaxSkipped: 100, MaxSkippedBytes: 64 << 10, Rich: richCapsOf(s.cfg.FilesMax, nil)})
		if err != nil {
			s.logf("collect files: %v", err)
		} else {
			resp.Files, resp.Images, resp.FilesTruncated, resp.FilesSkipped = c.files, c.images, c.truncated, c.skipped
			resp.Results, resp.ResultsTruncated = c.results, c.resultsTruncated
		}
	}
	s.auditEnd(id, caller, req.RunRequest, spec, use, res)
	s.metrics.run(string(res.Verdict), time.Since(admitted))
	return resp, nil
}

// teardown destroys a jail that has served its request (nil: none) in
// the background, counted in releasing, which Serve waits for before its
// sweep: the process never exits halfway through a removal. The jail's
// share of the budget comes back when its removal is done.
func (s *Server) teardown(jl *ready) {
	if jl == nil {
		return
	}
	s.releasing.Add(1)
	go func() {
		defer s.releasing.Done()
		if s.beforeTeardown != nil {
			s.beforeTeardown()
		}
		if err := jl.close(s.budget); err != nil {
			s.closeFailed(err)
		}
	}()
}

// coldJail prepares a jail for one request, making room in the budget by
// giving up waiting jails if it must, and waiting for running ones to end
// no longer than a queued request would.
func (s *Server) coldJail(ctx context.Context, spec jail.Spec) (*ready, error) {
	mem, pids := spec.Cgroup.MemoryMax, spec.Cgroup.PidsMax
	deadline := time.NewTimer(s.cfg.QueueWait)
	defer deadline.Stop()
	for !s.budget.TryTake(mem, pids) {
		freed := s.budget.Changed()
		evicted := false
		for _, p := range s.pools {
			if p.Evict() {
				evicted = true
				break
			}
		}
		if evicted {
			continue
		}
		select {
		case <-freed:
		case <-deadline.C:
			return nil, &api.Error{Status: 503, Msg: "busy: the server's memory or pids budget is spent"}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	jl, err := prepareJail(ctx, spec, s.cfg.Notices)
	if err != nil {
		s.budget.Give(mem, pids)
		return nil, err
	}
	return jl, nil
}

// start sends the run to the jail's driver and runs it: the job and its
// bulk on the driver's channel, then the request's stdin on the jail's. A
// client that goes away cancels ctx, which kills and reaps the jail.
func (s *Server) start(ctx context.Context, jl *ready, req *runRequest, spec jail.Spec, out *ndjson) *jail.Result {
	conn, err := kernel.NewConn(jl.driver, 0)
	if err != nil {
		return jail.FailedResult(spec, err)
	}
	defer conn.Close()
	go func() {
		// A program that never reads its stdin leaves this write blocked
		// until the jail ends and the pipe breaks.
		job, bulk := runJob(req, richCapsOf(s.cfg.FilesMax, nil), resultMax(spec.OutputLimit))
		if conn.SendRun(job, bulk...) == nil && req.Stdin != "" {
			_, _ = io.WriteString(jl.stdin, req.Stdin)
		}
		jl.stdin.Close()
	}()
	opts := jail.StartOptions{Timeout: spec.Timeout, AtExit: true}
	if out != nil {
		o, e := out.stream(api.StreamStdout), out.stream(api.StreamStderr)
		opts.Stdout, opts.Stderr = o, e
		defer o.flush()
		defer e.flush()
	}
	res, _ := jl.p.Start(ctx, opts)
	return res
}

// runJob is the driver's job for a validated request and its bulk,
// straight from the request's strings: the code and arguments as they
// are, the files decoded from base64 as they stream.
func runJob(req *runRequest, rich richCaps, resultMax int64) (kernel.Run, []io.Reader) {
	job := kernel.Run{Op: "run", ResultMax: resultMax, Rich: rich, FigureDir: "/work/" + figureDir}
	var bulk []io.Reader
	if req.Code != nil {
		n := len(*req.Code)
		job.Code = &n
		bulk = append(bulk, strings.NewReader(*req.Code))
	}
	for _, a := range req.Argv {
		job.Argv = append(job.Argv, len(a))
		bulk = append(bulk, strings.NewReader(a))
	}
	names := make([]string, 0, len(req.Files))
	for name := range req.Files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		job.Files = append(job.Files, kernel.RunFile{Name: name, Size: req.inputs[name].size})
		bulk = append(bulk, base64.NewDecoder(base64.StdEncoding, strings.NewReader(req.Files[name])))
	}
	return job, bulk
}

// ndjson writes a streamed response, one JSON object a line, flushed as
// it comes so the caller sees output while the run goes on. The jail's
// output is drained through write: a caller that stops reading must not
// stop the drain, or the jail (killed at its timeout or not) is never
// reaped and its slot, budget, cgroup and run directory are held for as
// long as the connection stays open.
//
// An in-process caller (POST /v1/mcp's tools) sets onOutput instead: each
// chunk of output is handed to it as text, with no JSON and no
// connection; it must not block (the drain waits for it).
type ndjson struct {
	onOutput func(stream, text string)

	mu      sync.Mutex
	w       io.Writer
	rc      *http.ResponseController
	timeout time.Duration // one line's write deadline
	end     time.Time     // no write waits past this (zero: none)
	cancel  func()        // kills the run
	dead    bool          // a write failed or was late: the rest is dropped
}

// begin sends the stream's status line and headers.
func (n *ndjson) begin() {
	if n.onOutput != nil {
		return
	}
	if hw, ok := n.w.(http.ResponseWriter); ok {
		hw.Header().Set("Content-Type", api.NDJSON)
		hw.WriteHeader(200)
	}
	n.write(nil)
}

// write sends line (nil: only the header) and flushes it, within the
// write deadline. The first failed or late write cancels the run and
// every later line is dropped, so the drain never blocks.
func (n *ndjson) write(line []byte) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.dead {
		return
	}
	if n.rc == nil { // a bare writer (tests): no connection to bound
		_, _ = n.w.Write(line)
		return
	}
	deadline := time.Now().Add(n.timeout)
	if !n.end.IsZero() && n.end.Before(deadline) {
		deadline = n.end
	}
	err := n.rc.SetWriteDeadline(deadline)
	if err == nil && line != nil {
		_, err = n.w.Write(line)
	}
	if err == nil {
		err = n.rc.Flush()
	}
	if err != nil {
		n.dead = true
		n.cancel()
	}
}

// last sends the stream's last line, the result: the run has ended, so
// its write has the deadline of any answer, not the run's end.
func (n *ndjson) last(line []byte) {
	n.end = time.Time{}
	n.write(line)
}

// streamWriter sends one stream's chunks as lines. A chunk boundary can
// fall inside a UTF-8 character; the incomplete tail waits for the next
// chunk, so that the JSON encoder does not turn each half into U+FFFD.
type streamWriter struct {
	n       *ndjson
	typ     string
	pending []byte
}

func (n *ndjson) stream(typ string) *streamWriter { return &streamWriter{n: n, typ: typ} }

func (s *streamWriter) Write(p []byte) (int, error) {
	b := append(s.pending, p...)
	cut := len(b)
	// At most 3 bytes of a character can be missing its end.
	for i := len(b) - 1; i >= 0 && i >= len(b)-3; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				cut = i
			}
			break
		}
	}
	s.pending = append([]byte(nil), b[cut:]...)
	if cut > 0 {
		s.send(b[:cut])
	}
	return len(p), nil
}

// flush sends what is left at the end of the run, whole or not.
func (s *streamWriter) flush() {
	if len(s.pending) > 0 {
		s.send(s.pending)
		s.pending = nil
	}
}

func (s *streamWriter) send(b []byte) {
	if s.n.onOutput != nil {
		s.n.onOutput(s.typ, string(b))
		return
	}
	s.n.write(marshal(api.StreamLine{Type: s.typ, Data: string(b)}))
}
