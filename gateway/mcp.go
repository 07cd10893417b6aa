package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/client"
	"github.com/stockade/stockade/internal/httpbuf"
	"github.com/stockade/stockade/mcp"
)

// POST /v1/mcp is the gateway's own: stockade's MCP tools (package mcp)
// as stateless Streamable HTTP, as `stockade serve` offers them, each
// tool's request sent through this gateway's own path as the caller's
// tenant (inGateway): the same policy (profiles, caps, session quota) and
// bounds as a request the tenant sends itself, then the cluster. The
// cluster never sees /v1/mcp.

type tenantKey struct{}

func (g *Gateway) mcpHandler() http.Handler {
	cache := sdk.NewSchemaCache()
	return sdk.NewStreamableHTTPHandler(func(r *http.Request) *sdk.Server {
		t, ok := r.Context().Value(tenantKey{}).(*Tenant)
		if !ok {
			return nil
		}
		c := client.Over(&inGateway{g: g, tenant: t, outer: r}, client.Options{MaxAnswer: maxToolAnswer})
		return mcp.NewServer(unstreamed{mcp.Remote(c)}, mcp.Options{Version: g.cfg.Version, SchemaCache: cache})
	}, &sdk.StreamableHTTPOptions{Stateless: true, JSONResponse: true, MaxRequestBodyBytes: g.cfg.MaxBody,
		PropagateRequestCancellation: true})
}

// maxToolAnswer bounds one tool request's answer held in memory: the
// cluster's own max_result keeps real ones far below it.
const maxToolAnswer = 64 << 20

// inGateway is an http.RoundTripper that serves an MCP tool's request
// with the gateway's own checks, as the tenant of the /v1/mcp request
// that made it. Its tools ask for whole answers (unstreamed), so the
// answer is kept in memory, bounded, and handed back.
type inGateway struct {
	g      *Gateway
	tenant *Tenant
	outer  *http.Request
}

func (t *inGateway) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	r.RequestURI = req.URL.RequestURI()
	r.TLS, r.RemoteAddr = t.outer.TLS, t.outer.RemoteAddr
	if r.Body == nil {
		r.Body = http.NoBody
	}
	w := httpbuf.New(maxToolAnswer)
	switch {
	case r.URL.Path == "/v1/mcp":
		writeError(w, http.StatusNotFound, "no /v1/mcp inside /v1/mcp")
	case t.g.bound(w, r, t.tenant):
		t.g.forward(w, r, t.tenant, "")
	}
	if w.Over() {
		return nil, fmt.Errorf("%s %s: an answer over %d bytes", r.Method, r.URL.Path, maxToolAnswer)
	}
	h := w.Header().Clone()
	h.Set("Content-Length", strconv.Itoa(len(w.Body())))
	return &http.Response{
		Status: fmt.Sprintf("%d %s", w.Status(), http.StatusText(w.Status())), StatusCode: w.Status(),
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: h,
		Body: io.NopCloser(bytes.NewReader(w.Body())), ContentLength: int64(len(w.Body())), Request: req,
	}, nil
}

// withTenant is r carrying its tenant, for mcpHandler's tools.
func withTenant(r *http.Request, t *Tenant) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), tenantKey{}, t))
}

// unstreamed asks for whole answers only: inGateway keeps a tool's
// answer whole in memory (and the cluster answers execs whole), so a
// tool's progress notifications go unsent through the gateway.
type unstreamed struct{ mcp.Backend }

func (u unstreamed) Run(ctx context.Context, req *api.RunRequest, _ mcp.OutputFunc) (*api.RunResponse, error) {
	return u.Backend.Run(ctx, req, nil)
}

func (u unstreamed) Exec(ctx context.Context, id string, req *api.ExecRequest, _ mcp.OutputFunc) (*api.ExecResult, error) {
	return u.Backend.Exec(ctx, id, req, nil)
}
