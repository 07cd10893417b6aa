package cluster

import (
	"strings"

	"github.com/stockade/stockade/internal/httpbuf"
)

// recorder is the response of an in-process request, bounded: past max
// bytes the body is dropped and the answer becomes a 502 saying so (a
// jailed program's output is bounded by the server already; this bounds
// what is stored in NATS).
type recorder struct{ *httpbuf.Writer }

func newRecorder(max int64) *recorder { return &recorder{httpbuf.New(max)} }

// answer is the recorded status, kept headers and body.
func (r *recorder) answer() reply {
	if r.Over() {
		return reply{Status: 502, Header: map[string]string{"Content-Type": "application/json"},
			Body: errorBody("the answer was larger than the cluster's max_result; it was not kept", nil)}
	}
	h := map[string]string{}
	for _, k := range keptHeaders {
		if v := r.Header().Get(k); v != "" {
			h[k] = v
		}
	}
	return reply{Status: r.Status(), Header: h, Body: r.Body()}
}

// safePath says whether p is a /v1 path a gateway may forward to a node.
func safePath(p string) bool {
	return (p == "/v1/run" || p == "/v1/sessions" || strings.HasPrefix(p, "/v1/sessions/")) &&
		!strings.Contains(p, "..") && !strings.ContainsAny(p, "?#\x00")
}
