package cluster

import (
	"encoding/json"
	"time"
)

// job is one run on the stream, as the gateway published it.
type job struct {
	RunID    string          `json:"run_id"`
	Tenant   string          `json:"tenant"`
	Deadline time.Time       `json:"deadline"` // not started by then: expired
	Request  json.RawMessage `json:"request"`  // the POST /v1/run body
	// Stream: the caller asked for NDJSON; the node publishes the lines
	// on RunSubject (an older node answers whole, which callers take).
	Stream bool `json:"stream,omitempty"`
}

// claim is the value of a run's key in stockade_claims: who took it.
// Incarnation tells a node's restart from the node: a claim of an
// earlier incarnation is lost even when the name heartbeats again.
type claim struct {
	Node        string    `json:"node"`
	Incarnation string    `json:"incarnation"`
	Tenant      string    `json:"tenant"`
	At          time.Time `json:"at"`
	// Result is what became of the run's result, once it has one:
	// resultStored (so a result missing now was evicted, or outlived
	// result_ttl), or why JetStream refused to store it.
	Result string `json:"result,omitempty"`
}

// resultStored is a claim's Result once its run's result was stored.
const resultStored = "stored"

// expiredBy is the claim a gateway takes for a run past its deadline in
// the queue, so that no node starts it after the caller was answered.
const expiredBy = "-expired"

// result is the value of a run's key in stockade_results.
type result struct {
	Tenant      string          `json:"tenant"`
	Node        string          `json:"node,omitempty"`
	Status      int             `json:"status"`
	ContentType string          `json:"content_type,omitempty"`
	RetryAfter  string          `json:"retry_after,omitempty"`
	Body        json.RawMessage `json:"body"`
}

// Node states in a heartbeat.
const (
	StateUp       = "up"
	StateDraining = "draining"
	StateFenced   = "fenced"
	// StateStopped: drained and stopped; its sessions ended with verdict
	// shutdown.
	StateStopped = "stopped"
)

// heartbeat is a node's value in stockade_nodes.
type heartbeat struct {
	State       string    `json:"state"`
	Incarnation string    `json:"incarnation"`
	Slots       int       `json:"slots"`
	Free        int       `json:"free"`
	PoolReady   int       `json:"pool_ready"`
	At          time.Time `json:"at"`
}

// sessionRec is a session's value in stockade_sessions.
type sessionRec struct {
	Node        string `json:"node"`
	Tenant      string `json:"tenant"`
	Incarnation string `json:"incarnation"` // the node's when the session was made
}

// endedKey is the key in stockade_nodes where a node says why the
// sessions of one of its incarnations ended (drained, fenced): a session
// of an incarnation without it was lost.
func endedKey(node, incarnation string) string { return node + ".ended." + incarnation }

// call is a session request to a node, and reply its answer.
type call struct {
	Tenant string `json:"tenant"`
	Method string `json:"method"`
	Path   string `json:"path"`
	Query  string `json:"query,omitempty"`
	Body   []byte `json:"body,omitempty"`
}

type reply struct {
	Status int               `json:"status"`
	Header map[string]string `json:"header,omitempty"`
	Body   []byte            `json:"body,omitempty"`
	// Incarnation is the answering node's: a session made on another
	// incarnation of the node is not held by this one.
	Incarnation string `json:"incarnation,omitempty"`
}

// The headers an answer carries between node and gateway.
var keptHeaders = []string{"Content-Type", "Retry-After", "Location", "Allow"}

func errorBody(msg string, extra map[string]any) []byte {
	m := map[string]any{"error": msg}
	for k, v := range extra {
		m[k] = v
	}
	b, _ := json.Marshal(m)
	return b
}
