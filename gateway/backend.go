package gateway

import (
	"io"
	"net/http"
)

// Backend runs what the gateway admits: *cluster.Backend, over NATS, in
// `stockade gateway`; a fake in tests. Its methods take only the standard
// library's types, so that gateway and cluster never import each other
// (cmd/stockade wires them; see CLUSTER.md's seam).
type Backend interface {
	// Serve answers one authenticated /v1 request for the tenant named, writing
	// status, headers and body to w. The gateway has already bounded the
	// body (r.Body is all of it, r.ContentLength its length), checked the
	// tenant may use the profile named and tightened the limits. The
	// tenant owns what the request makes: a session of another tenant
	// must answer 404, as another uid's does on the unix socket.
	// idempotencyKey is the request's Idempotency-Key ("" none), already
	// checked: printable ASCII, at most MaxIdempotencyKey bytes.
	Serve(w http.ResponseWriter, r *http.Request, tenant, idempotencyKey string)
	// Metrics writes the backend's Prometheus text lines.
	Metrics(w io.Writer)
}
