package cluster

import (
	"net/http"
	"strings"
)

// recorder is the response of an in-process request, bounded: past max
// bytes the body is dropped and the answer becomes a 502 saying so (a
// jailed program's output is bounded by the server already; this bounds
// what is stored in NATS).
type recorder struct {
	max    int64
	header http.Header
	status int
	body   []byte
	over   bool
}

func newRecorder(max int64) *recorder { return &recorder{max: max, header: http.Header{}} }

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = 200
	}
	if r.over || int64(len(r.body)+len(p)) > r.max {
		r.over, r.body = true, nil
		return len(p), nil
	}
	r.body = append(r.body, p...)
	return len(p), nil
}

// answer is the recorded status, kept headers and body.
func (r *recorder) answer() reply {
	if r.status == 0 {
		r.status = 200
	}
	if r.over {
		return reply{Status: 502, Header: map[string]string{"Content-Type": "application/json"},
			Body: errorBody("the answer was larger than the cluster's max_result; it was not kept", nil)}
	}
	h := map[string]string{}
	for _, k := range keptHeaders {
		if v := r.header.Get(k); v != "" {
			h[k] = v
		}
	}
	return reply{Status: r.status, Header: h, Body: r.body}
}

// safePath says whether p is a /v1 path a gateway may forward to a node.
func safePath(p string) bool {
	return (p == "/v1/run" || p == "/v1/sessions" || strings.HasPrefix(p, "/v1/sessions/")) &&
		!strings.Contains(p, "..") && !strings.ContainsAny(p, "?#\x00")
}
