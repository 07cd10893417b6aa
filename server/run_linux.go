package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/stockade/stockade/jail"
)

func (s *Server) handleRun(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		writeError(w, &apiError{Status: 405, Msg: "POST /v1/run"})
		return
	}
	s.inflight.Add(1)
	defer s.inflight.Done()
	caller, e := s.admitPeer(r)
	if e != nil {
		writeError(w, e)
		return
	}
	req, spec, cold, err := s.parse(w, r)
	if err != nil {
		var ae *apiError
		if !errors.As(err, &ae) {
			ae = badRequest("%v", err)
		}
		writeError(w, ae)
		return
	}
	switch err := s.gate.enter(r.Context(), caller.uid); {
	case errors.Is(err, errCallerCap):
		retryAfter(w, time.Second)
		writeError(w, &apiError{Status: 429, Msg: fmt.Sprintf("uid %d already has %d runs running or waiting", caller.uid, s.cfg.PerCaller)})
		return
	case errors.Is(err, errBusy):
		retryAfter(w, s.cfg.QueueWait/4)
		writeError(w, &apiError{Status: 503, Msg: fmt.Sprintf("busy: %d runs at once and the queue is full or waited %v", s.cfg.Concurrency, s.cfg.QueueWait)})
		return
	case err != nil:
		return // the caller went away while queued
	}
	defer s.gate.leave(caller.uid)
	s.run(w, r, caller, req, spec, cold)
}

// parse reads and checks the request and makes its jail's spec.
func (s *Server) parse(w http.ResponseWriter, r *http.Request) (*RunRequest, jail.Spec, bool, error) {
	var spec jail.Spec
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") && ct != "application/x-www-form-urlencoded" {
		return nil, spec, false, &apiError{Status: 415, Msg: "Content-Type " + ct + ": send application/json"}
	}
	req, err := decodeRequest(http.MaxBytesReader(w, r.Body, s.cfg.MaxBody))
	if err != nil {
		return nil, spec, false, err
	}
	if err := req.validate(1024); err != nil {
		return nil, spec, false, err
	}
	name := req.Profile
	if name == "" {
		name = s.cfg.Profiles[0].Name
	}
	spec, ok := s.profiles[name]
	if !ok {
		return nil, spec, false, badRequest("profile %q: not offered by this server (it offers: %s)", name, s.profileNames())
	}
	req.Profile = name
	if len(req.Files) > 0 && spec.WorkdirMode == jail.WorkdirNone {
		return nil, spec, false, badRequest("files: profile %s has no writable /work", name)
	}
	cold, err := applyLimits(&spec, req.Limits)
	return req, spec, cold, err
}

// run serves one admitted request: a jail from the pool (or a fresh one),
// the job fed to it, the result, the files, and the jail destroyed.
func (s *Server) run(w http.ResponseWriter, r *http.Request, caller peer, req *RunRequest, spec jail.Spec, cold bool) {
	admitted := time.Now()
	use := PoolUse{}
	var jl *ready
	pl := s.pools[req.Profile]
	switch {
	case cold:
		use.Reason = "limits differ from the profile's"
	case pl.target == 0:
		use.Reason = "no pool"
	default:
		if jl = pl.take(); jl != nil {
			use.Hit = true
		} else {
			use.Reason = "pool empty"
		}
	}
	var res *jail.Result
	if jl == nil {
		var err error
		jl, err = s.coldJail(r.Context(), spec)
		if err != nil {
			var ae *apiError
			if errors.As(err, &ae) {
				retryAfter(w, time.Second)
				writeError(w, ae)
				return
			}
			res = jail.FailedResult(spec, err)
		}
	}
	if jl != nil {
		defer jl.close(s.budget)
	}
	use.WaitedMs = float64(time.Since(admitted).Microseconds()) / 1e3

	stream := strings.Contains(r.Header.Get("Accept"), NDJSON)
	var out *ndjson
	if stream {
		w.Header().Set("Content-Type", NDJSON)
		w.WriteHeader(200)
		out = &ndjson{w: w}
		if f, ok := w.(http.Flusher); ok {
			out.flush = f.Flush
			f.Flush()
		}
	}
	if res == nil {
		res = s.start(r.Context(), jl, req, spec, out)
	}
	res.StockadeVersion = s.cfg.Version
	resp := &RunResponse{Result: res, Files: map[string]string{}, Images: []Image{}, FilesSkipped: []string{}, Pool: use}
	if jl != nil && res.Verdict != jail.VerdictError {
		c, err := collectWork(jl.p.Workdir(), req.Files, collectLimits{MaxBytes: s.cfg.FilesMax, MaxFiles: 1000, MaxDepth: 32})
		if err != nil {
			s.logf("collect files: %v", err)
		} else {
			resp.Files, resp.Images, resp.FilesTruncated, resp.FilesSkipped = c.files, c.images, c.truncated, c.skipped
		}
	}
	s.auditRun(caller, req, spec, res, use)
	if stream {
		resp.Type = "result"
		out.write(marshal(resp))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if res.Verdict == jail.VerdictError {
		w.WriteHeader(500) // the server could not set up the jail
	}
	w.Write(marshal(resp))
}

// coldJail prepares a jail for one request, making room in the budget by
// giving up waiting jails if it must, and waiting for running ones to end
// no longer than a queued request would.
func (s *Server) coldJail(ctx context.Context, spec jail.Spec) (*ready, error) {
	mem, pids := spec.Cgroup.MemoryMax, spec.Cgroup.PidsMax
	deadline := time.NewTimer(s.cfg.QueueWait)
	defer deadline.Stop()
	for !s.budget.tryTake(mem, pids) {
		freed := s.budget.changed()
		evicted := false
		for _, p := range s.pools {
			if p.evict() {
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
			return nil, &apiError{Status: 503, Msg: "busy: the server's memory or pids budget is spent"}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	jl, err := prepareJail(ctx, spec, s.cfg.Notices, s.preamble())
	if err != nil {
		s.budget.give(mem, pids)
		return nil, err
	}
	return jl, nil
}

// start feeds the job to the jail and runs it; a client that goes away
// cancels r's context, which kills and reaps the jail.
func (s *Server) start(ctx context.Context, jl *ready, req *RunRequest, spec jail.Spec, out *ndjson) *jail.Result {
	hdr, err := encodeJob(job{Code: req.Code, Argv: req.Argv, Files: req.Files})
	if err != nil {
		return jail.FailedResult(spec, err)
	}
	go func() {
		// A program that never reads its stdin leaves this write blocked
		// until the jail ends and the pipe breaks.
		_, _ = jl.stdin.Write(hdr)
		if req.Stdin != "" {
			_, _ = io.WriteString(jl.stdin, req.Stdin)
		}
		jl.stdin.Close()
	}()
	opts := jail.StartOptions{Timeout: spec.Timeout}
	if out != nil {
		o, e := out.stream("stdout"), out.stream("stderr")
		opts.Stdout, opts.Stderr = o, e
		defer o.flush()
		defer e.flush()
	}
	res, _ := jl.p.Start(ctx, opts)
	return res
}

func (s *Server) auditRun(caller peer, req *RunRequest, spec jail.Spec, res *jail.Result, use PoolUse) {
	e := AuditEntry{Time: time.Now().UTC(), UID: caller.uid, PID: caller.pid, Profile: req.Profile,
		Argv: req.Argv, Files: len(req.Files), Limits: limitsOf(spec), Verdict: res.Verdict,
		ExitCode: res.ExitCode, WallMs: res.WallMs, Pool: use, Blocked: res.BlockedSyscalls, Error: res.Error}
	if req.Code != nil {
		sum := sha256.Sum256([]byte(*req.Code))
		e.CodeSHA256 = hex.EncodeToString(sum[:])
	}
	s.audit.write(e)
}

// ndjson writes a streamed response, one JSON object a line, flushed as
// it comes so the caller sees output while the run goes on.
type ndjson struct {
	mu    sync.Mutex
	w     io.Writer
	flush func()
}

func (n *ndjson) write(line []byte) {
	n.mu.Lock()
	defer n.mu.Unlock()
	// A caller that went away cancels the run; its writes failing here
	// must not stop the jail's output from being drained.
	_, _ = n.w.Write(line)
	if n.flush != nil {
		n.flush()
	}
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
	s.n.write(marshal(struct {
		Type string `json:"type"`
		Data string `json:"data"`
	}{s.typ, string(b)}))
}
