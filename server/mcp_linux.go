package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stockade/stockade/mcp"
)

// mcpHandler is POST /v1/mcp: stockade's MCP tools (package mcp) as
// stateless Streamable HTTP. The tools run on this server's own routes,
// called in process (inProcess) as the caller: a session the model makes
// here is the caller's, counted against the caller's caps, and the jail's
// policy is this server's profile, exactly as for a request the caller
// sends itself. No MCP session is kept: tools name sessions by their
// session_id argument.
func (s *Server) mcpHandler(api http.Handler) http.Handler {
	cache := sdk.NewSchemaCache()
	h := sdk.NewStreamableHTTPHandler(func(r *http.Request) *sdk.Server {
		p, ok := r.Context().Value(ctxKey{}).(peer)
		if !ok {
			return nil
		}
		b := mcp.NewHTTPBackend(&inProcess{api: api, caller: p}, "", nil)
		return mcp.NewServer(b, mcp.Options{Version: s.cfg.Version, SchemaCache: cache})
	}, &sdk.StreamableHTTPOptions{Stateless: true, JSONResponse: true, MaxRequestBodyBytes: s.cfg.MaxBody,
		// A caller that goes away cancels its run, as on /v1/run.
		PropagateRequestCancellation: true})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, e := s.admitPeer(r); e != nil {
			s.writeError(w, e)
			return
		}
		// The body is read here, as /v1/run's is: within --body-timeout
		// and --max-body, and counted against --body-budget for as long as
		// the call holds it (the tools' own requests take their shares
		// too: the server holds both copies). The SDK would read it with
		// no deadline and no budget.
		share, ok := s.takeBodyShare(w, r)
		if !ok {
			return
		}
		defer s.bodies.give(share)
		rc := http.NewResponseController(w)
		body, err := s.readBodyWithin(rc, r)
		if err != nil {
			s.refuseBody(w, err)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		h.ServeHTTP(&deadlineWriter{ResponseWriter: w, rc: rc, timeout: s.cfg.WriteTimeout}, r)
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

// inProcess is an http.RoundTripper that serves a request with the
// server's own routes, as caller: the tools' requests get the checks,
// caps and ownership of a request the caller made on the socket.
type inProcess struct {
	api    http.Handler
	caller peer
}

func (t *inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := context.WithValue(req.Context(), ctxKey{}, t.caller)
	r := req.Clone(ctx)
	r.RequestURI = req.URL.RequestURI()
	r.RemoteAddr = "in-process"
	if r.Body == nil {
		r.Body = http.NoBody
	}
	pr, pw := io.Pipe()
	w := &pipeWriter{header: http.Header{}, body: pw, headerDone: make(chan struct{})}
	go func() {
		defer func() {
			// net/http recovers a handler's panic on a connection; here it
			// would end the server, so it ends this request alone.
			if p := recover(); p != nil {
				w.writeHeader(http.StatusInternalServerError)
				pw.CloseWithError(fmt.Errorf("in-process %s %s: handler panic: %v", r.Method, r.URL.Path, p))
				return
			}
			w.writeHeader(http.StatusOK) // a handler that wrote nothing
			pw.Close()
		}()
		t.api.ServeHTTP(w, r)
	}()
	select {
	case <-w.headerDone:
	case <-ctx.Done():
		pr.CloseWithError(ctx.Err())
		return nil, ctx.Err()
	}
	return &http.Response{
		Status: fmt.Sprintf("%d %s", w.status, http.StatusText(w.status)), StatusCode: w.status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: w.sent, Body: pr, ContentLength: -1, Request: req,
	}, nil
}

// pipeWriter is the ResponseWriter of an in-process request: the header
// is handed over once written, the body streams through a pipe (NDJSON
// lines as they come). It has no connection, so the handlers' read and
// write deadlines do not apply; the caller's own connection has its own.
type pipeWriter struct {
	header     http.Header
	sent       http.Header
	body       *io.PipeWriter
	once       sync.Once
	status     int
	headerDone chan struct{}
}

func (w *pipeWriter) Header() http.Header { return w.header }

func (w *pipeWriter) writeHeader(code int) {
	w.once.Do(func() {
		w.status, w.sent = code, w.header.Clone()
		close(w.headerDone)
	})
}

func (w *pipeWriter) WriteHeader(code int) { w.writeHeader(code) }

func (w *pipeWriter) Write(b []byte) (int, error) {
	w.writeHeader(http.StatusOK)
	return w.body.Write(b)
}

func (w *pipeWriter) Flush() {}
