package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/stockade/stockade/api"
)

// Local is the node's own server (package server's *Server): the seam a
// node serves a gateway's requests through.
type Local interface {
	ServeTenant(w http.ResponseWriter, r *http.Request, tenant, runID string)
	FreeSlots() int
	Slots() int
	PoolReady() int
	EndSessions(why string) int
	LiveSessions() int
	Logf(format string, a ...any)
}

// maxSessionCalls bounds the session requests a node serves at once;
// past it a request answers 503.
const maxSessionCalls = 256

// Node is `stockade serve --cluster`: it heartbeats, pulls one run at a
// time while its server has a free slot, claims it, runs it in process,
// stores the result; and answers session requests for its sessions.
type Node struct {
	cfg   Config
	local Local
	nc    *nats.Conn
	js    jetstream.JetStream
	b     buckets
	cons  jetstream.Consumer
	sub   *nats.Subscription

	mu          sync.Mutex
	state       string
	incarnation string
	lastStored  time.Time // when the last heartbeat that was stored was sent
	stored      bool      // a heartbeat of this incarnation is stored

	running  sync.WaitGroup
	inflight atomic.Int64
	calls    chan struct{}
	draining atomic.Bool
	// freed wakes the pull loop when a run gives its slot back.
	freed chan struct{}
}

func newIncarnation() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// StartNode connects, binds the stream's consumer and the buckets
// (waiting for a gateway to have made them, until ctx ends), and starts
// the heartbeat and session service. Run then pulls work.
func StartNode(ctx context.Context, c Config, local Local) (*Node, error) {
	if err := c.Validate(true); err != nil {
		return nil, err
	}
	n := &Node{cfg: c, local: local, state: StateUp, incarnation: newIncarnation(), calls: make(chan struct{}, maxSessionCalls), freed: make(chan struct{}, 1)}
	// The URLs in their order: a node names its own host's server
	// first, so that a partition that cuts another server off does not
	// cut this node off with it.
	nc, err := connect(c, "stockade-node-"+c.Node, c.Node, nats.DontRandomize(),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { local.Logf("cluster: disconnected from NATS: %v", err) }),
		nats.ReconnectHandler(func(nc *nats.Conn) { local.Logf("cluster: reconnected to NATS at %s", nc.ConnectedUrlRedacted()) }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { local.Logf("cluster: NATS: %v", err) }))
	if err != nil {
		return nil, err
	}
	n.nc = nc
	if n.js, err = jetstream.New(nc); err != nil {
		nc.Close()
		return nil, err
	}
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		if err = n.bind(ctx); err == nil {
			break
		}
		local.Logf("cluster: waiting for the stream and buckets (a gateway makes them): %v", err)
		select {
		case <-ctx.Done():
			nc.Close()
			return nil, fmt.Errorf("cluster: %w", err)
		case <-time.After(wait):
		}
	}
	n.sub, err = nc.Subscribe(NodeSubject(c.Node), n.serveCall)
	if err != nil {
		nc.Close()
		return nil, err
	}
	n.sub.SetPendingLimits(maxSessionCalls, int(c.MaxRequest)*4)
	return n, nil
}

func (n *Node) bind(ctx context.Context) error {
	bctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	b, err := bind(bctx, n.js)
	if err != nil {
		return err
	}
	cons, err := n.js.Consumer(bctx, StreamName, ConsumerName)
	if err != nil {
		return fmt.Errorf("consumer %s: %w", ConsumerName, err)
	}
	n.b, n.cons = b, cons
	return nil
}

// Run heartbeats and pulls work until ctx ends, then drains: it stops
// pulling, says draining, and waits up to grace for the runs it holds and,
// at the same time, up to drainSessions for its sessions to end by
// themselves (their owners still reach them meanwhile). The sessions still
// alive then are ended, verdict shutdown; with drainSessions 0 that is
// left to the server's stop.
func (n *Node) Run(ctx context.Context, grace, drainSessions time.Duration) error {
	hbCtx, stopHB := context.WithCancel(context.Background())
	hbDone := make(chan struct{})
	go func() { defer close(hbDone); n.heartbeats(hbCtx) }()
	n.pull(ctx)
	n.draining.Store(true)
	n.setState(StateDraining)
	// Said at once, not at the next beat: gateways place no new session
	// on a draining host.
	n.putHeartbeat(context.Background())
	n.local.Logf("cluster: draining: no new runs; up to %v for the %d running, up to %v for the %d sessions to end",
		grace, n.inflight.Load(), drainSessions, n.local.LiveSessions())
	done := make(chan struct{})
	go func() { n.running.Wait(); close(done) }()
	sessionsDone := make(chan struct{})
	go func() {
		defer close(sessionsDone)
		end := time.Now().Add(drainSessions)
		for n.local.LiveSessions() > 0 && time.Now().Before(end) {
			time.Sleep(min(100*time.Millisecond, time.Until(end)))
		}
	}()
	select {
	case <-done:
	case <-time.After(grace):
		n.local.Logf("cluster: grace over with %d runs still running; the server's own grace ends them", n.inflight.Load())
	}
	<-sessionsDone
	if drainSessions > 0 {
		if live := n.local.LiveSessions(); live > 0 {
			n.local.Logf("cluster: --drain-sessions %v over with %d sessions alive: ending them (verdict shutdown)", drainSessions, live)
			n.local.EndSessions(fmt.Sprintf("its host was drained: the %v it gives sessions to end (--drain-sessions) ran out", drainSessions))
		}
	}
	n.putHeartbeat(context.Background())
	stopHB()
	<-hbDone
	return nil
}

// Close ends the node's NATS connection, after the server stopped. A
// drained node says so in its last heartbeat (state stopped), so that
// gateways answer its sessions' owners "ended: shutdown", not "lost".
func (n *Node) Close() {
	if n.sub != nil {
		n.sub.Unsubscribe()
	}
	if n.draining.Load() {
		n.mu.Lock()
		n.state = StateStopped
		inc := n.incarnation
		n.mu.Unlock()
		n.sayEnded(inc, "its host was drained and stopped")
		n.putHeartbeat(context.Background())
	}
	n.nc.Drain()
}

func (n *Node) setState(s string) {
	n.mu.Lock()
	if n.state != StateFenced && n.state != StateStopped || s == StateUp {
		n.state = s
	}
	n.mu.Unlock()
}

func (n *Node) snapshot() heartbeat {
	n.mu.Lock()
	defer n.mu.Unlock()
	return heartbeat{State: n.state, Incarnation: n.incarnation, Slots: n.local.Slots(),
		Free: n.free(), PoolReady: n.local.PoolReady(), At: time.Now().UTC()}
}

// free is how many runs this node would take now.
func (n *Node) free() int {
	return max(0, min(n.local.FreeSlots(), n.local.Slots()-int(n.inflight.Load())))
}

// heartbeatEvery: four beats in a grace, so that one lost beat is not a
// fence and the gateway's view is at most a quarter of grace old.
func (n *Node) heartbeatEvery() time.Duration { return n.cfg.Grace.D() / 4 }

// putHeartbeat stores one heartbeat; it counts from when it was sent.
func (n *Node) putHeartbeat(ctx context.Context) bool {
	hb := n.snapshot()
	sent := time.Now()
	b, _ := json.Marshal(hb)
	pctx, cancel := context.WithTimeout(ctx, n.heartbeatEvery())
	defer cancel()
	if _, err := n.b.nodes.Put(pctx, n.cfg.Node, b); err != nil {
		return false
	}
	n.mu.Lock()
	if hb.Incarnation == n.incarnation {
		n.lastStored, n.stored = sent, true
	}
	n.mu.Unlock()
	return true
}

// heartbeats stores one every grace/4; one that cannot be stored for
// grace/2 fences the node: it takes nothing new and ends its sessions,
// before any gateway (which waits a whole grace) calls it lost. When
// heartbeats are stored again the node comes back as a new incarnation:
// the runs it held stay lost to their callers (their late results are
// still stored), its ended sessions answer 410.
func (n *Node) heartbeats(ctx context.Context) {
	t := time.NewTicker(n.heartbeatEvery())
	defer t.Stop()
	start := time.Now()
	for {
		ok := n.putHeartbeat(ctx)
		n.mu.Lock()
		since := n.lastStored
		if since.IsZero() {
			since = start
		}
		state := n.state
		n.mu.Unlock()
		switch {
		case !ok && state != StateFenced && time.Since(since) >= n.cfg.Grace.D()/2:
			n.fence(time.Since(since))
		case ok && state == StateFenced && !n.draining.Load():
			n.mu.Lock()
			old := n.incarnation
			n.mu.Unlock()
			n.sayEnded(old, "its host lost the cluster and fenced itself")
			n.mu.Lock()
			n.incarnation, n.state, n.stored = newIncarnation(), StateUp, false
			n.mu.Unlock()
			n.local.Logf("cluster: heartbeats stored again: back as incarnation %s (the runs of %s stay lost)", n.incarnation, old)
			n.putHeartbeat(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sayEnded records that the sessions of incarnation inc ended with
// verdict shutdown, and why, before a new incarnation answers for the
// node: gateways answer them 410 ended, not lost.
func (n *Node) sayEnded(inc, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n.b.nodes.Put(ctx, endedKey(n.cfg.Node, inc), []byte(why))
}

func (n *Node) fence(since time.Duration) {
	n.mu.Lock()
	n.state = StateFenced
	n.mu.Unlock()
	n.local.Logf("cluster: fenced at %s: no heartbeat stored for %v (grace %v): taking no new runs, ending sessions",
		time.Now().UTC().Format(time.RFC3339Nano), since.Round(time.Millisecond), n.cfg.Grace.D())
	n.local.EndSessions("the host lost the cluster (fenced): its sessions cannot be reached safely")
}

// canPull says whether the node may take a run now: up, its current
// heartbeat stored, and a slot free.
func (n *Node) canPull() bool {
	n.mu.Lock()
	ok := n.state == StateUp && n.stored
	n.mu.Unlock()
	return ok && n.free() > 0
}

// pull fetches as many runs as the node has free slots, each as one is
// free: a run that ends wakes it at once (freed); a slot freed otherwise
// (a local caller's run ending) is seen within 20 ms.
func (n *Node) pull(ctx context.Context) {
	for ctx.Err() == nil {
		if !n.canPull() {
			select {
			case <-ctx.Done():
			case <-n.freed:
			case <-time.After(20 * time.Millisecond):
			}
			continue
		}
		batch, err := n.cons.Fetch(max(1, n.free()), jetstream.FetchMaxWait(time.Second))
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		for m := range batch.Messages() {
			n.take(ctx, m)
		}
	}
}

// take claims one message's run and starts it.
func (n *Node) take(ctx context.Context, m jetstream.Msg) {
	var j job
	data := m.Data()
	if int64(len(data)) > n.cfg.MaxRequest+4096 || json.Unmarshal(data, &j) != nil || j.RunID == "" || j.Tenant == "" || !validKey(j.RunID) {
		n.local.Logf("cluster: dropped a malformed message (%d bytes)", len(data))
		m.Term()
		return
	}
	n.mu.Lock()
	inc := n.incarnation
	n.mu.Unlock()
	cl := claim{Node: n.cfg.Node, Incarnation: inc, Tenant: j.Tenant, At: time.Now().UTC()}
	cb, _ := json.Marshal(cl)
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err := n.b.claims.Create(cctx, j.RunID, cb)
	cancel()
	switch {
	case errors.Is(err, jetstream.ErrKeyExists):
		// Taken before (a redelivery) or expired by a gateway: not ours.
		m.Ack()
		return
	case err != nil && !n.claimLanded(j.RunID, cb):
		// Not claimed: let it be redelivered (to anyone).
		m.Nak()
		return
	}
	m.Ack()
	n.inflight.Add(1)
	n.running.Add(1)
	go func() {
		defer n.running.Done()
		n.run(j, cl, func() {
			n.inflight.Add(-1)
			select {
			case n.freed <- struct{}{}:
			default:
			}
		})
	}()
}

// claimLanded says whether a Create whose answer was lost (a timeout)
// stored this node's claim after all: then the run is this node's, and
// nobody else will ever start it.
func (n *Node) claimLanded(id string, mine []byte) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e, err := n.b.claims.Get(ctx, id)
	return err == nil && bytes.Equal(e.Value(), mine)
}

func validKey(k string) bool {
	if len(k) == 0 || len(k) > 128 {
		return false
	}
	for _, c := range k {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// run serves the claimed run and stores its answer. A run is never
// cancelled by the node: its server's grace is what ends it. release
// gives its slot back once the server answered, so that the next run is
// pulled while this one's answer is stored.
func (n *Node) run(j job, cl claim, release func()) {
	out := &streamOut{rec: newRecorder(n.cfg.MaxResult), nc: n.nc, subject: RunSubject(n.cfg.Node, j.RunID), max: n.cfg.maxLine()}
	// Said to the waiting gateway once the answer is stored (or given up).
	defer out.done()
	if time.Now().After(j.Deadline) {
		out.WriteHeader(200)
		out.Write(errorBody("waited in the queue past its deadline; never started", map[string]any{"verdict": "expired", "run_id": j.RunID}))
	} else {
		req, _ := http.NewRequest(http.MethodPost, "/v1/run", bytes.NewReader(j.Request))
		req.Header.Set("Content-Type", "application/json")
		if j.Stream {
			req.Header.Set("Accept", api.NDJSON)
		}
		req.ContentLength = int64(len(j.Request))
		n.local.ServeTenant(out, req, j.Tenant, j.RunID)
	}
	release()
	a := out.answer()
	b := mustJSON(result{Tenant: j.Tenant, Node: n.cfg.Node, Status: a.Status, ContentType: a.Header["Content-Type"],
		RetryAfter: a.Header["Retry-After"], Body: jsonOrString(a.Body)})
	// Stored until it is (a partition heals), for up to the results' TTL:
	// a late result is fetchable. One JetStream refuses for good (too
	// large, say) is not tried again: the claim says so, and the caller is answered
	// result_not_stored at once.
	deadline := time.Now().Add(n.cfg.ResultTTL.D())
	for wait := 100 * time.Millisecond; time.Now().Before(deadline); wait = min(2*wait, 5*time.Second) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := n.b.results.Put(ctx, j.RunID, b)
		cancel()
		var apiErr *jetstream.APIError
		switch {
		case err == nil:
			n.markClaim(j.RunID, cl, resultStored)
			return
		case errors.As(err, &apiErr) && apiErr.Code >= 400 && apiErr.Code < 500:
			// A refusal of this result (a 5xx is JetStream unavailable
			// for now, or out of room: tried again).
			n.local.Logf("cluster: run %s: JetStream refused its result (%d bytes): %v; its caller is told result_not_stored", j.RunID, len(b), err)
			n.markClaim(j.RunID, cl, "JetStream refused to store it: "+apiErr.Description)
			return
		}
		time.Sleep(wait)
	}
	n.local.Logf("cluster: run %s: its result could not be stored within %v; dropped", j.RunID, n.cfg.ResultTTL.D())
}

// markClaim says in the run's claim what became of its result, so that
// a result missing from the results bucket is told from one still to
// come (a gateway answers result_evicted or result_not_stored).
func (n *Node) markClaim(id string, cl claim, what string) {
	cl.Result = what // the rest as claimed: At is when it was
	cb, _ := json.Marshal(cl)
	deadline := time.Now().Add(n.cfg.Grace.D())
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := n.b.claims.Put(ctx, id, cb)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			n.local.Logf("cluster: run %s: its claim could not say its result was %q: %v", id, what, err)
			return
		}
		time.Sleep(wait)
	}
}

// jsonOrString keeps a JSON body as it is and quotes anything else.
func jsonOrString(b []byte) json.RawMessage {
	if json.Valid(b) {
		return b
	}
	q, _ := json.Marshal(string(b))
	return q
}

// serveCall answers one session request from a gateway, in its own
// goroutine, at most maxSessionCalls at once.
func (n *Node) serveCall(m *nats.Msg) {
	respond := func(rp reply) {
		n.mu.Lock()
		rp.Incarnation = n.incarnation
		n.mu.Unlock()
		b, _ := json.Marshal(rp)
		err := m.Respond(b)
		if err == nil {
			return
		}
		// Unsent, the gateway would wait request_timeout for nothing: a
		// small answer that says why goes instead.
		n.local.Logf("cluster: a session answer of %d bytes (status %d) could not be sent (NATS max_payload %d): %v; answered 502 instead",
			len(b), rp.Status, n.nc.MaxPayload(), err)
		small, _ := json.Marshal(reply{Status: 502, Incarnation: rp.Incarnation, Header: map[string]string{"Content-Type": "application/json"},
			Body: errorBody(fmt.Sprintf("the session's answer (%d bytes) could not be sent through the cluster (NATS max_payload %d): %v", len(b), n.nc.MaxPayload(), err),
				map[string]any{"verdict": "answer_too_large"})})
		if err := m.Respond(small); err != nil {
			n.local.Logf("cluster: the 502 in its place could not be sent either: %v", err)
		}
	}
	var c call
	// Its body is base64 in the call: 4/3 of up to max_request (payloadNeeded).
	if int64(len(m.Data)) > n.cfg.payloadNeeded() || json.Unmarshal(m.Data, &c) != nil || c.Tenant == "" || !safePath(c.Path) {
		respond(reply{Status: 400, Body: errorBody("malformed cluster request", nil)})
		return
	}
	select {
	case n.calls <- struct{}{}:
	default:
		respond(reply{Status: 503, Header: map[string]string{"Retry-After": "1"}, Body: errorBody("busy: too many session requests at once on this host", nil)})
		return
	}
	go func() {
		defer func() { <-n.calls }()
		ctx, cancel := context.WithTimeout(context.Background(), n.cfg.RequestTimeout.D())
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, c.Method, c.Path, bytes.NewReader(c.Body))
		if err != nil {
			respond(reply{Status: 400, Body: errorBody("malformed cluster request", nil)})
			return
		}
		req.URL.RawQuery = c.Query
		req.ContentLength = int64(len(c.Body))
		req.Header.Set("Content-Type", "application/json")
		rec := newRecorder(n.cfg.MaxResult)
		n.local.ServeTenant(rec, req, c.Tenant, "")
		respond(rec.answer())
	}()
}
