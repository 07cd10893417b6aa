package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/mcp"
)

// mcpHandler is POST /v1/mcp: stockade's MCP tools (package mcp) as
// stateless Streamable HTTP. The request is admitted once, as /v1/run's
// is: counted against the caller's --per-caller and the queue, its body
// against --body-budget and read within --body-timeout and --max-body
// (the SDK would read it with no deadline and no budget). The tools then
// call this server's operations in process, directly (mcpCaller), as the
// caller: a session the model makes here is the caller's, counted against
// the caller's caps, and the jail's policy is this server's profile,
// exactly as for a request the caller sends itself. No MCP session is
// kept: tools name sessions by their session_id argument.
func (s *Server) mcpHandler() http.Handler {
	cache := sdk.NewSchemaCache()
	h := sdk.NewStreamableHTTPHandler(func(r *http.Request) *sdk.Server {
		p, ok := r.Context().Value(ctxKey{}).(peer)
		if !ok {
			return nil
		}
		return mcp.NewServer(&mcpCaller{s: s, caller: p}, mcp.Options{Version: s.cfg.Version, SchemaCache: cache})
	}, &sdk.StreamableHTTPOptions{Stateless: true, JSONResponse: true, MaxRequestBodyBytes: s.cfg.MaxBody,
		// A caller that goes away cancels its run, as on /v1/run.
		PropagateRequestCancellation: true})
	return s.admitted("GET, POST, DELETE", "POST /v1/mcp", func(w http.ResponseWriter, r *http.Request, caller peer) {
		done, ok := s.admitBody(w, r, caller)
		if !ok {
			return
		}
		defer done()
		rc := http.NewResponseController(w)
		body, err := s.readBodyWithin(rc, r)
		if err != nil {
			s.refuseBody(w, err)
			return
		}
		// One request, one call: a batch would run each of its calls at
		// once under this one admission, past --per-caller (mcp.IsBatch).
		if mcp.IsBatch(body) {
			s.writeError(w, badRequest("a JSON-RPC batch: send one message a request (--per-caller counts requests)"))
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		// From here the tools' context ends when the caller closes the
		// connection or the server kills the runs, and not at a
		// half-close, as a run's does.
		ctx, stopRun := s.runContext(r)
		defer stopRun()
		h.ServeHTTP(&deadlineWriter{ResponseWriter: w, rc: rc, timeout: s.cfg.WriteTimeout}, r.WithContext(ctx))
	})
}

// deadlineWriter gives every write of the SDK's answer --write-timeout,
// as the server's own answers have: a caller that never reads must not
// hold the handler.
type deadlineWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func (d *deadlineWriter) WriteHeader(code int) {
	_ = d.rc.SetWriteDeadline(time.Now().Add(d.timeout))
	d.ResponseWriter.WriteHeader(code)
}

func (d *deadlineWriter) Write(b []byte) (int, error) {
	_ = d.rc.SetWriteDeadline(time.Now().Add(d.timeout))
	return d.ResponseWriter.Write(b)
}

func (d *deadlineWriter) Flush() {
	_ = d.rc.Flush()
}

func (d *deadlineWriter) Unwrap() http.ResponseWriter { return d.ResponseWriter }

// mcpCaller is the backend of POST /v1/mcp's tools: this server's own
// operations, called in process as caller, with typed requests and
// answers. The MCP request was admitted once (mcpHandler); each operation
// makes the checks and takes the caps its route does past admission (a
// run slot, a session against the caller's --sessions-per-caller, the
// session's owner), so that a tool can do nothing the caller could not do
// on the socket.
type mcpCaller struct {
	s      *Server
	caller peer
}

// errOf is e as an error: nil when e is (never a typed nil).
func errOf(e *api.Error) error {
	if e == nil {
		return nil
	}
	return e
}

// output is the stream of a call whose caller wants its output as it
// comes (nil: the answer alone).
func output(onOutput mcp.OutputFunc) *ndjson {
	if onOutput == nil {
		return nil
	}
	return &ndjson{onOutput: onOutput}
}

func (m *mcpCaller) Run(ctx context.Context, wire *api.RunRequest, onOutput mcp.OutputFunc) (*api.RunResponse, error) {
	s := m.s
	req := &runRequest{RunRequest: wire}
	spec, cold, err := s.checkRun(req)
	if err != nil {
		return nil, s.bodyRefusal(err)
	}
	if err := s.gate.Enter(ctx); err != nil {
		return nil, s.gateRefusal(ctx, err)
	}
	defer s.gate.Leave()
	if s.isVM(req.Profile) {
		resp, e := s.runVM(ctx, req, spec)
		return resp, errOf(e)
	}
	resp, e := s.run(ctx, m.caller, req, spec, cold, output(onOutput))
	return resp, errOf(e)
}

func (m *mcpCaller) CreateSession(ctx context.Context, req *api.SessionRequest) (*api.SessionCreated, error) {
	created, e := m.s.createSession(ctx, m.caller, req)
	return created, errOf(e)
}

func (m *mcpCaller) Exec(ctx context.Context, id string, req *api.ExecRequest, onOutput mcp.OutputFunc) (*api.ExecResult, error) {
	if c := m.vmClient(id); c != nil {
		res, err := c.Exec(ctx, id, req)
		return res, apiError(err)
	}
	ss, e := m.s.sessionOf(m.caller, id)
	if e != nil {
		return nil, e
	}
	res, e := m.s.execCell(ctx, m.caller, ss, req, output(onOutput))
	return res, errOf(e)
}

func (m *mcpCaller) Interrupt(ctx context.Context, id string) error {
	if c := m.vmClient(id); c != nil {
		return apiError(c.Interrupt(ctx, id))
	}
	ss, e := m.s.sessionOf(m.caller, id)
	if e != nil {
		return e
	}
	return errOf(ss.interruptExec())
}

func (m *mcpCaller) CloseSession(ctx context.Context, id string) (*api.SessionEnd, error) {
	if c := m.vmClient(id); c != nil {
		end, err := c.EndSession(ctx, id)
		return end, apiError(err)
	}
	ss, e := m.s.sessionOf(m.caller, id)
	if e != nil {
		return nil, e
	}
	end, e := m.s.endSession(m.caller, ss)
	return end, errOf(e)
}

// workOf finds the caller's session id and holds its /work (ss.work) for
// one file operation on p, checked as the files routes check it.
func (m *mcpCaller) workOf(id, p string, writes bool) (*session, func(), error) {
	ss, e := m.s.sessionOf(m.caller, id)
	if e != nil {
		return nil, nil, e
	}
	ss.touch()
	if p != "." {
		if err := checkWorkPath(p); err != nil {
			return nil, nil, err
		}
	}
	unlock, e := ss.work(writes)
	if e != nil {
		return nil, nil, e
	}
	return ss, unlock, nil
}

func (m *mcpCaller) ListFiles(ctx context.Context, id, dir string) (*api.FileList, error) {
	if c := m.vmClient(id); c != nil {
		list, err := c.ListFiles(ctx, id, dir)
		return list, apiError(err)
	}
	p := workPathOf(dir)
	ss, unlock, err := m.workOf(id, p, false)
	if err != nil {
		return nil, err
	}
	defer unlock()
	list, err := listWork(ss.workFD, p, 10000)
	if err != nil {
		return nil, workError(p, err)
	}
	return list, nil
}

// OpenFile opens a file of the session's /work. Its /work stays held
// (ss.work) until the file is closed.
func (m *mcpCaller) OpenFile(ctx context.Context, id, p string) (io.ReadCloser, int64, error) {
	if c := m.vmClient(id); c != nil {
		f, size, err := c.OpenFile(ctx, id, p)
		return f, size, apiError(err)
	}
	ss, unlock, err := m.workOf(id, p, false)
	if err != nil {
		return nil, 0, err
	}
	f, size, err := openWorkFile(ss.workFD, p)
	if err != nil {
		unlock()
		if errors.Is(err, errIsDir) || errors.Is(err, errNotRegular) {
			return nil, 0, badRequest("%s: %v", p, err)
		}
		return nil, 0, workError(p, err)
	}
	// The jail may change the file meanwhile: size bytes at most.
	return &heldFile{Reader: io.LimitReader(f, size), f: f, unlock: unlock}, size, nil
}

// heldFile is a file of a session's /work, which it holds until closed.
type heldFile struct {
	io.Reader
	f      *os.File
	unlock func()
}

func (h *heldFile) Close() error {
	err := h.f.Close()
	h.unlock()
	return err
}

func (m *mcpCaller) WriteFile(ctx context.Context, id, p string, data []byte) error {
	if c := m.vmClient(id); c != nil {
		_, err := c.WriteFile(ctx, id, p, bytes.NewReader(data))
		return apiError(err)
	}
	ss, unlock, err := m.workOf(id, p, true)
	if err != nil {
		return err
	}
	defer unlock()
	uid, gid := ss.jl.p.WorkOwner()
	if _, err := writeWorkFile(ss.workFD, p, bytes.NewReader(data), uid, gid); err != nil {
		return workError(p, err)
	}
	return nil
}
