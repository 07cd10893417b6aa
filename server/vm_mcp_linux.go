package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/client"
)

// POST /v1/mcp's tools on a vm session (vm_linux.go): the session's own
// routes, called in process as the MCP request's caller, so that a tool
// takes the path, the checks and the bounds a request on the socket does.

// vmClient is a client of this server's routes as m's caller when id is
// a vm session's (live or ended), else nil.
func (m *mcpCaller) vmClient(id string) *client.Client {
	if !m.s.vm.known(id) {
		return nil
	}
	return client.Over(asCaller{s: m.s, caller: m.caller}, client.Options{})
}

// asCaller serves a request with the server's handler as caller.
type asCaller struct {
	s      *Server
	caller peer
}

func (a asCaller) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, a.caller))
	if r.Body == nil {
		r.Body = http.NoBody // as a server's request has it
	}
	r.RequestURI = r.URL.RequestURI()
	w := &bufferedResponse{header: http.Header{}, status: 200}
	a.s.handler().ServeHTTP(w, r)
	return &http.Response{StatusCode: w.status, Header: w.header, Body: io.NopCloser(&w.body),
		ContentLength: int64(w.body.Len()), Request: r}, nil
}

// bufferedResponse is an http.ResponseWriter that keeps the answer.
type bufferedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
	wrote  bool
}

func (b *bufferedResponse) Header() http.Header { return b.header }
func (b *bufferedResponse) WriteHeader(code int) {
	if !b.wrote {
		b.status, b.wrote = code, true
	}
}
func (b *bufferedResponse) Write(p []byte) (int, error) {
	b.wrote = true
	return b.body.Write(p)
}

// apiError is a client's refusal as the server's own error.
func apiError(err error) error {
	var ce *client.Error
	if errors.As(err, &ce) {
		msg := ce.Body.Msg
		if msg == "" {
			msg = ce.Error()
		}
		return &api.Error{Status: ce.Status, Msg: msg}
	}
	return err
}
