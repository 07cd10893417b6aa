package cluster

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/internal/httpbody"
)

// Backend is what a gateway forwards each authenticated request to.
type Backend struct {
	cfg Config
	nc  *nats.Conn
	js  jetstream.JetStream
	b   buckets

	hostLost, expired, submitted, duplicates, refused, resultsGone atomic.Int64
	// queueWait: from a run's publish to its claim by a node (or to its
	// expiry), by this gateway's runs.
	queueWait histogram
	recs      recCache

	// The gateway's own beat in the nodes bucket: the clock a node's
	// heartbeat is judged by (see look).
	beatKey  string
	stopBeat context.CancelFunc
	beatDone chan struct{}
}

// NewBackend connects as the gateway, makes (or updates) the stream, the
// consumer and the buckets, and binds them.
func NewBackend(ctx context.Context, c Config) (*Backend, error) {
	if err := c.Validate(false); err != nil {
		return nil, err
	}
	nc, err := connect(c, "stockade-gateway", "gateway")
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := Setup(sctx, js, c); err != nil {
		nc.Close()
		return nil, err
	}
	b, err := bind(sctx, js)
	if err != nil {
		nc.Close()
		return nil, err
	}
	g := &Backend{cfg: c, nc: nc, js: js, b: b, beatKey: gatewayBeatPrefix + RunID("", ""), beatDone: make(chan struct{})}
	var bctx context.Context
	bctx, g.stopBeat = context.WithCancel(context.Background())
	g.beat(bctx) // the first before any run is judged
	go func() {
		defer close(g.beatDone)
		// Often: a node is judged lost only once this beat is grace newer
		// than its own, so the beat's lag adds to the time to host_lost.
		t := time.NewTicker(min(c.Grace.D()/4, 500*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-bctx.Done():
				return
			case <-t.C:
				g.beat(bctx)
			}
		}
	}()
	return g, nil
}

// gatewayBeatPrefix starts the gateways' keys in the nodes bucket (a
// node's name has no dot).
const gatewayBeatPrefix = "gw."

func (g *Backend) beat(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Grace.D()/4)
	defer cancel()
	g.b.nodes.Put(ctx, g.beatKey, []byte(time.Now().UTC().Format(time.RFC3339Nano)))
}

// Close ends the connection.
func (g *Backend) Close() {
	g.stopBeat()
	<-g.beatDone
	dctx, cancel := context.WithTimeout(context.Background(), time.Second)
	g.b.nodes.Purge(dctx, g.beatKey)
	cancel()
	g.nc.Close()
}

// RunIDHeader names the cluster's id of a run in every answer about it.
const RunIDHeader = "Stockade-Run-Id"

// RunID is the id of a run: derived from (tenant, key) when the caller
// gave an Idempotency-Key, so that a resubmission is the same run.
func RunID(tenant, key string) string {
	if key == "" {
		b := make([]byte, 16)
		rand.Read(b)
		return hex.EncodeToString(b)
	}
	h := sha256.Sum256([]byte(tenant + "\x00" + key))
	return hex.EncodeToString(h[:16])
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body)
}

func unavailable(w http.ResponseWriter, msg string) {
	w.Header().Set("Retry-After", "1")
	writeJSON(w, 503, errorBody(msg, nil))
}

// Serve answers one /v1 request of tenant: POST /v1/run, GET
// /v1/runs/{id}, and the session routes.
func (g *Backend) Serve(w http.ResponseWriter, r *http.Request, tenant, idempotencyKey string) {
	p := r.URL.Path
	switch {
	case p == "/v1/run":
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			writeJSON(w, 405, errorBody("POST /v1/run", nil))
			return
		}
		g.submit(w, r, tenant, idempotencyKey)
	case strings.HasPrefix(p, "/v1/runs/"):
		g.getRun(w, r, tenant, strings.TrimPrefix(p, "/v1/runs/"))
	case p == "/v1/sessions" && r.Method == http.MethodPost:
		g.createSession(w, r, tenant)
	case strings.HasPrefix(p, "/v1/sessions/"):
		g.sessionCall(w, r, tenant)
	case p == "/v1/sessions" && r.Method == http.MethodGet:
		g.listSessions(w, r, tenant)
	case p == "/v1/sessions":
		w.Header().Set("Allow", "GET, POST")
		writeJSON(w, 405, errorBody("GET or POST /v1/sessions", nil))
	default:
		writeJSON(w, 404, errorBody("no such endpoint: "+p, nil))
	}
}

// readBounded reads r's body, at most max bytes (false past them), with
// no deadline of its own: the gateway read the body within its own.
func readBounded(r *http.Request, max int64) ([]byte, bool, error) {
	b, err := httpbody.ReadWithin(nil, r, max, 0)
	if errors.Is(err, httpbody.ErrTooLarge) {
		return nil, false, nil
	}
	return b, true, err
}

func (g *Backend) submit(w http.ResponseWriter, r *http.Request, tenant, key string) {
	body, ok, err := readBounded(r, g.cfg.MaxRequest)
	switch {
	case err != nil:
		writeJSON(w, 400, errorBody("reading the body: "+err.Error(), nil))
		return
	case !ok:
		writeJSON(w, 413, errorBody(fmt.Sprintf("body over the cluster's max_request (%d bytes)", g.cfg.MaxRequest), nil))
		return
	case !json.Valid(body):
		writeJSON(w, 400, errorBody("the body is not JSON", nil))
		return
	}
	id := RunID(tenant, key)
	stream := strings.Contains(r.Header.Get("Accept"), api.NDJSON)
	// Before the run is published, so that nothing of its node's is missed.
	sub, err := g.nc.SubscribeSync(RunSubject("*", id))
	if err != nil {
		unavailable(w, "the cluster cannot be reached: "+err.Error())
		return
	}
	defer sub.Unsubscribe()
	sub.SetPendingLimits(maxStreamLines+16, g.cfg.maxStreamBytes())
	data := mustJSON(job{RunID: id, Tenant: tenant, Deadline: time.Now().Add(g.cfg.QueueWait.D()).UTC(), Request: body, Stream: stream})
	w.Header().Set(RunIDHeader, id)
	ack, err := g.publish(r.Context(), id, data)
	if err != nil {
		g.refused.Add(1)
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) {
			unavailable(w, "the cluster's queue refused the run (full: queue_max): "+apiErr.Description)
			return
		}
		unavailable(w, "the cluster's queue did not take the run within "+publishFor.String()+" ("+err.Error()+"): its NATS servers are down, electing a leader or cannot store (their logs say which); the same Idempotency-Key runs it once")
		return
	}
	enqueued := time.Now()
	if ack.Duplicate {
		g.duplicates.Add(1)
		enqueued = time.Time{} // its wait is the first submission's
	} else {
		g.submitted.Add(1)
	}
	g.wait(w, r, tenant, id, enqueued, enqueued.Add(g.cfg.QueueWait.D()), &runStream{sub: sub, stream: stream, next: 1})
}

// errDupInProcess is JetStream's answer to a message id being stored
// by another publish at this moment: the same run, resubmitted at once.
const errDupInProcess = 10158

// publishFor bounds how long a publish is tried again while JetStream
// does not answer (a leader election, a NATS server restarting).
const publishFor = 15 * time.Second

// publish puts the run on the stream, once per id: a resubmission while
// the first is being stored is asked again, then answers a duplicate;
// one JetStream did not answer is sent again (the id dedupes it) for up
// to publishFor. A refusal (the queue is full) is answered at once.
func (g *Backend) publish(ctx context.Context, id string, data []byte) (*jetstream.PubAck, error) {
	end := time.Now().Add(publishFor)
	for try := 0; ; try++ {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ack, err := g.js.Publish(pctx, WorkSubject, data, jetstream.WithMsgID(id))
		cancel()
		if err == nil || ctx.Err() != nil || time.Now().After(end) {
			return ack, err
		}
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode != errDupInProcess {
			return ack, err
		}
		time.Sleep(min(time.Duration(try+1)*20*time.Millisecond, 500*time.Millisecond))
	}
}

// A waiting gateway looks for a run's result, claim and the claimer's
// heartbeat every pollEvery: the run's node says when its answer is
// stored (its Stockade-Done), so the looks are for what no node says (its
// host lost, the run expired in the queue, a Done lost while the
// gateway's connection was away). A look is four reads of the cluster: a
// thousand runs waiting must not be a thousand looks each 50 ms.
const pollEvery = 500 * time.Millisecond

// wait answers the run's result once stored; host_lost once the node
// that claimed it has a heartbeat older than grace (or a newer
// incarnation); expired when nobody claimed it by deadline. It looks
// every pollEvery (a resubmission at once: its answer may be stored), and
// at once when the run's node says on rs's subscription that the answer
// is stored; a streamed run's lines are forwarded as they come (rs.take).
// A duplicate (enqueued zero) waits for the first submission's deadline
// at most as long as queue_wait from now, and its wait is not observed.
// A caller that leaves does not end the wait: the run goes on in the
// cluster, so the wait does too, its answer unsent (still stored,
// fetchable), and Serve returns once the run is answered (or result_ttl
// after the caller left, when no more is kept of it): what the gateway
// counts while Serve runs (a tenant's max_runs) is held as long as the
// run is in the cluster, not only as long as its caller stays.
func (g *Backend) wait(w http.ResponseWriter, r *http.Request, tenant, id string, enqueued, deadline time.Time, rs *runStream) {
	if enqueued.IsZero() {
		deadline = time.Now().Add(g.cfg.QueueWait.D())
	}
	rs.g, rs.w, rs.rc, rs.tenant, rs.id = g, w, http.NewResponseController(w), tenant, id
	ctx, left, leftAt := r.Context(), false, time.Time{}
	leave := func() {
		ctx, left, leftAt = context.WithoutCancel(r.Context()), true, time.Now()
		w = httpDiscard{}
		rs.w, rs.rc, rs.broken = w, http.NewResponseController(w), true
	}
	nextLook := time.Now().Add(pollEvery)
	if enqueued.IsZero() {
		nextLook = time.Now()
	}
	var resultAt time.Time // when a look first found the result, lines still to come
	for {
		if !time.Now().Before(nextLook) {
			st := g.look(ctx, tenant, id)
			switch {
			case st.result != nil && rs.begun && !rs.broken && resultAt.IsZero():
				// The node sent its lines before it stored the result: they
				// may still be on their way. Until its done, or lineGrace.
				resultAt = time.Now()
			case st.result != nil && (!rs.begun || rs.broken || time.Since(resultAt) > lineGrace):
				if rs.begun {
					rs.finish(storedLine(id, st.result))
				} else {
					g.writeResult(w, id, st.result)
				}
				go g.observeWait(tenant, id, enqueued, cmp.Or(st.claim, rs.claim))
				return
			case st.gone != "":
				g.resultsGone.Add(1)
				if rs.begun {
					rs.finish(resultLine(goneBody(id, st)))
				} else {
					writeJSON(w, 200, goneBody(id, st))
				}
				go g.observeWait(tenant, id, enqueued, cmp.Or(st.claim, rs.claim))
				return
			case st.lost != "":
				g.hostLost.Add(1)
				if rs.begun {
					rs.finish(resultLine(lostBody(id, st.claim.Node, st.lost)))
				} else {
					writeJSON(w, 200, lostBody(id, st.claim.Node, st.lost))
				}
				go g.observeWait(tenant, id, enqueued, cmp.Or(st.claim, rs.claim))
				return
			case st.claim == nil && time.Now().After(deadline):
				// Take the claim ourselves, so that no node starts it after
				// this answer.
				cb, _ := json.Marshal(claim{Node: expiredBy, Tenant: tenant, At: time.Now().UTC()})
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := g.b.claims.Create(ctx, id, cb)
				cancel()
				if err == nil {
					g.expired.Add(1)
					if !enqueued.IsZero() {
						g.queueWait.observe(time.Since(enqueued))
					}
					eb := errorBody(fmt.Sprintf("waited in the cluster's queue over queue_wait (%v); never started", g.cfg.QueueWait.D()),
						map[string]any{"verdict": "expired", "run_id": id})
					g.b.results.Put(context.Background(), id, mustJSON(result{Tenant: tenant, Status: 200, ContentType: "application/json", Body: eb}))
					writeJSON(w, 200, eb)
					return
				}
			}
			if resultAt.IsZero() {
				nextLook = time.Now().Add(pollEvery)
			} else {
				nextLook = resultAt.Add(lineGrace + time.Millisecond)
			}
		}
		mctx, cancel := context.WithDeadline(ctx, nextLook)
		m, err := rs.sub.NextMsgWithContext(mctx)
		if err != nil && !errors.Is(err, nats.ErrSlowConsumer) {
			<-mctx.Done() // a timeout, or no subscription (the connection closed): the look is next
		}
		cancel()
		switch {
		case left && (g.nc.IsClosed() || time.Since(leftAt) > g.cfg.ResultTTL.D()):
			// The gateway is closing, or the run outlived what the cluster
			// keeps of it (a node that never stores its result): nobody
			// to answer, nothing left to hold a count for.
			return
		case !left && r.Context().Err() != nil:
			leave() // the caller left; the run goes on, its result fetchable
		case errors.Is(err, nats.ErrSlowConsumer):
			rs.broken = true // lines were dropped: the stored result ends it
		case err == nil:
			switch rs.take(m) {
			case takeDone:
				// The answer is stored: read it now. A stream's result
				// line comes before the done: a stream that had none lost it.
				nextLook = time.Now()
				rs.broken = rs.broken || rs.begun
			case takeFinal:
				go g.observeWait(tenant, id, enqueued, rs.claim)
				return
			case takeGone:
				leave() // the caller stopped reading; the run goes on
			}
		}
	}
}

// observeWait puts a run's time in the queue (publish to claim) into the
// histogram, reading the claim when the answer came before it was seen.
func (g *Backend) observeWait(tenant, id string, enqueued time.Time, c *claim) {
	if enqueued.IsZero() {
		return
	}
	if c == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		e, err := g.b.claims.Get(ctx, id)
		if err != nil {
			return
		}
		var cl claim
		if json.Unmarshal(e.Value(), &cl) != nil || cl.Tenant != tenant {
			return
		}
		c = &cl
	}
	if c.Node == expiredBy {
		return // observed as it expired
	}
	g.queueWait.observe(max(0, c.At.Sub(enqueued)))
}

// mustJSON is v's JSON with <, > and & kept as they are, as the server
// writes them: json.Marshal writes each as \u003c, six bytes for one, and
// a body carried as a json.RawMessage (a run's request in its job, its
// answer in its result) grew up to six times past the bounds sized for
// it (max_request, max_result), and was refused.
func mustJSON(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// The verdicts of a run that ended without a result to give.
const (
	verdictEvicted   = "result_evicted"
	verdictNotStored = "result_not_stored"
)

func goneBody(id string, st runState) []byte {
	return errorBody("the run ended on "+st.claim.Node+", but "+st.gone+"; it had its effects; not retried",
		map[string]any{"verdict": st.goneVerdict, "run_id": id, "node": st.claim.Node})
}

func lostBody(id, node, why string) []byte {
	return errorBody("the host running it stopped answering ("+why+"); it may have had effects; not retried",
		map[string]any{"verdict": "host_lost", "run_id": id, "node": node})
}

func (g *Backend) writeResult(w http.ResponseWriter, id string, res *result) {
	if res.RetryAfter != "" {
		w.Header().Set("Retry-After", res.RetryAfter)
	}
	w.Header().Set(RunIDHeader, id)
	writeJSON(w, res.Status, resultBody(id, res))
}

// resultBody is a stored result's body with the cluster's run id and
// node added.
func resultBody(id string, res *result) []byte {
	body := []byte(res.Body)
	// The run's own answer, with the cluster's id of it added.
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) == nil && m != nil {
		if _, has := m["run_id"]; !has {
			m["run_id"], _ = json.Marshal(id)
		}
		if _, has := m["node"]; !has && res.Node != "" {
			m["node"], _ = json.Marshal(res.Node)
		}
		body = mustJSON(m)
	}
	return body
}

// runState is what the cluster says of a run now.
type runState struct {
	result *result
	claim  *claim
	lost   string // why its claimer is lost
	// gone says why a run that ended has no result to give: evicted (the
	// results bucket was full: results_max_bytes) or refused by
	// JetStream. Its verdict names which.
	gone, goneVerdict string
}

func (g *Backend) look(ctx context.Context, tenant, id string) runState {
	var st runState
	if !validKey(id) {
		return st
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if e, err := g.b.results.Get(ctx, id); err == nil {
		var res result
		if json.Unmarshal(e.Value(), &res) == nil && res.Tenant == tenant {
			st.result = &res
		}
		return st
	}
	e, err := g.b.claims.Get(ctx, id)
	if err != nil {
		return st
	}
	var c claim
	if json.Unmarshal(e.Value(), &c) != nil || c.Tenant != tenant {
		return st
	}
	st.claim = &c
	if c.Node == expiredBy {
		return st
	}
	switch {
	case c.Result == resultStored:
		// Stored before the claim said so: one missing now (the read
		// above may have come just before it) is read again.
		if e, err := g.b.results.Get(ctx, id); err == nil {
			var res result
			if json.Unmarshal(e.Value(), &res) == nil && res.Tenant == tenant {
				st.result = &res
			}
			return st
		} else if errors.Is(err, jetstream.ErrKeyNotFound) {
			st.gone, st.goneVerdict = "its result was stored, then dropped to make room for newer ones (the cluster's results_max_bytes) or kept past result_ttl", verdictEvicted
		}
		return st
	case c.Result != "":
		st.gone, st.goneVerdict = "its result could not be stored: "+c.Result, verdictNotStored
		return st
	}
	st.lost = g.nodeLost(ctx, c.Node, c.Incarnation)
	return st
}

// nodeLost says why node, as the incarnation that took a run or made a
// session, is lost, or "" while it may live. Its heartbeat is read from
// the cluster now (never a cached watch: one goes stale while NATS
// restarts and calls live hosts lost), and judged against this gateway's
// own last stored beat as well as the clock: while NATS stores nothing
// (an election, a restart) every heartbeat ages, and none of that is a
// host's fault. An empty incarnation is not compared.
func (g *Backend) nodeLost(ctx context.Context, node, incarnation string) string {
	he, err := g.b.nodes.Get(ctx, node)
	ge, gerr := g.b.nodes.Get(ctx, g.beatKey)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return "no heartbeat of " + node
	case err != nil || gerr != nil:
		// NATS itself is not answering: that says nothing of the host.
		return ""
	}
	var hb heartbeat
	json.Unmarshal(he.Value(), &hb)
	age, behind := time.Since(he.Created()), ge.Created().Sub(he.Created())
	if age > g.cfg.Grace.D() && behind > g.cfg.Grace.D() {
		return fmt.Sprintf("no heartbeat of %s for %v, over the grace of %v", node, age.Round(time.Millisecond), g.cfg.Grace.D())
	}
	if incarnation != "" && hb.Incarnation != incarnation {
		return node + " restarted (or fenced and came back) since the run or session began"
	}
	return ""
}

func (g *Backend) getRun(w http.ResponseWriter, r *http.Request, tenant, id string) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		writeJSON(w, 405, errorBody("GET /v1/runs/{id}", nil))
		return
	}
	st := g.look(r.Context(), tenant, id)
	switch {
	case st.result != nil:
		g.writeResult(w, id, st.result)
	case st.gone != "":
		writeJSON(w, 200, goneBody(id, st))
	case st.lost != "":
		writeJSON(w, 200, lostBody(id, st.claim.Node, st.lost))
	case st.claim != nil:
		writeJSON(w, 202, mustJSON(map[string]any{"run_id": id, "state": "running", "node": st.claim.Node}))
	default:
		writeJSON(w, 404, errorBody("no such run (unknown, another tenant's, still queued, or past result_ttl)", map[string]any{"run_id": id}))
	}
}

// nodes reads every heartbeat, now.
func (g *Backend) nodes(ctx context.Context) map[string]heartbeat {
	out := map[string]heartbeat{}
	keys, err := g.b.nodes.Keys(ctx)
	if err != nil {
		return out
	}
	for _, k := range keys {
		if strings.HasPrefix(k, gatewayBeatPrefix) || strings.Contains(k, ".ended.") {
			continue
		}
		e, err := g.b.nodes.Get(ctx, k)
		if err != nil {
			continue
		}
		var hb heartbeat
		if json.Unmarshal(e.Value(), &hb) != nil {
			continue
		}
		if time.Since(e.Created()) > g.cfg.Grace.D() {
			hb.State = "lost"
		}
		out[k] = hb
	}
	return out
}

// sessionGone answers for a session whose node no longer holds it: 410
// ended with verdict shutdown when the node said why (drained, fenced),
// else 410 lost.
func (g *Backend) sessionGone(w http.ResponseWriter, rec sessionRec) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	e, err := g.b.nodes.Get(ctx, endedKey(rec.Node, rec.Incarnation))
	cancel()
	if rec.Incarnation != "" && err == nil {
		writeJSON(w, 410, errorBody("the session ended (shutdown): "+string(e.Value()),
			map[string]any{"state": "ended", "verdict": "shutdown", "node": rec.Node}))
		return
	}
	writeJSON(w, 410, errorBody("the host holding this session is gone", map[string]any{"state": "lost", "node": rec.Node}))
}

// forward sends one session request to its node and returns the answer;
// a node that is not there is answered 410 lost at once (false).
func (g *Backend) forward(w http.ResponseWriter, r *http.Request, tenant string, rec sessionRec, body []byte) (reply, bool) {
	node := rec.Node
	data, _ := json.Marshal(call{Tenant: tenant, Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Body: body})
	ctx, cancel := context.WithTimeout(r.Context(), g.cfg.RequestTimeout.D())
	defer cancel()
	// The request's own no-responders says at once that the node is
	// gone, unless the node died just before and the news of its
	// subscription's end had not yet crossed the NATS route: then nobody
	// answers, and the node's heartbeat says, within the grace, what the
	// request timeout would only guess at.
	type answer struct {
		m   *nats.Msg
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		m, err := g.nc.RequestWithContext(ctx, NodeSubject(node), data)
		answered <- answer{m, err}
	}()
	look := time.NewTicker(pollEvery)
	defer look.Stop()
	var a answer
	for waiting := true; waiting; {
		select {
		case a = <-answered:
			waiting = false
		case <-look.C:
			if g.nodeLost(ctx, node, rec.Incarnation) != "" {
				cancel()
				g.sessionGone(w, rec)
				return reply{}, false
			}
		}
	}
	m, err := a.m, a.err
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			g.sessionGone(w, rec)
			return reply{}, false
		}
		unavailable(w, "the host holding this session did not answer: "+err.Error())
		return reply{}, false
	}
	var rp reply
	if json.Unmarshal(m.Data, &rp) != nil {
		writeJSON(w, 502, errorBody("a malformed answer from "+node, nil))
		return reply{}, false
	}
	return rp, true
}

func writeReply(w http.ResponseWriter, rp reply) {
	for k, v := range rp.Header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(rp.Status)
	w.Write(rp.Body)
}

func (g *Backend) createSession(w http.ResponseWriter, r *http.Request, tenant string) {
	body, ok, err := readBounded(r, g.cfg.MaxRequest)
	if err != nil || !ok {
		writeJSON(w, 413, errorBody(fmt.Sprintf("body over the cluster's max_request (%d bytes)", g.cfg.MaxRequest), nil))
		return
	}
	// The node with the most free slots that is up.
	type cand struct {
		name, incarnation string
		free              int
	}
	var cs []cand
	for name, hb := range g.nodes(r.Context()) {
		if hb.State == StateUp {
			cs = append(cs, cand{name, hb.Incarnation, hb.Free})
		}
	}
	if len(cs) == 0 {
		unavailable(w, "no host of the cluster is up")
		return
	}
	// Ties (sessions use no run slot) go to any of the freest, at random.
	mrand.Shuffle(len(cs), func(i, j int) { cs[i], cs[j] = cs[j], cs[i] })
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].free > cs[j].free })
	rp, ok := g.forward(w, r, tenant, sessionRec{Node: cs[0].name, Tenant: tenant, Incarnation: cs[0].incarnation}, body)
	if !ok {
		return
	}
	if rp.Status/100 == 2 {
		var info struct {
			ID string `json:"session_id"`
		}
		if json.Unmarshal(rp.Body, &info) == nil && validKey(info.ID) {
			ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
			_, err := g.b.sessions.Put(ctx, info.ID, mustJSON(sessionRec{Node: cs[0].name, Tenant: tenant, Incarnation: cs[0].incarnation}))
			cancel()
			if err != nil {
				// Unreachable through the cluster: end it on its node.
				del, _ := http.NewRequestWithContext(context.Background(), http.MethodDelete, "/v1/sessions/"+info.ID, nil)
				g.forward(httpDiscard{}, del, tenant, sessionRec{Node: cs[0].name, Tenant: tenant}, nil)
				unavailable(w, "the session could not be recorded in the cluster: "+err.Error())
				return
			}
		}
	}
	writeReply(w, rp)
}

// listSessions is GET /v1/sessions through the cluster: every node not
// lost is asked for the tenant's sessions, at once, and the lists are
// joined. A node that does not answer in time is left out (its sessions
// answer lost).
func (g *Backend) listSessions(w http.ResponseWriter, r *http.Request, tenant string) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	data, _ := json.Marshal(call{Tenant: tenant, Method: http.MethodGet, Path: "/v1/sessions", Query: r.URL.RawQuery})
	type part struct {
		sessions []json.RawMessage
		err      string
	}
	var names []string
	for name, hb := range g.nodes(ctx) {
		if hb.State != "lost" && hb.State != StateStopped {
			names = append(names, name)
		}
	}
	parts := make(chan part, len(names))
	for _, name := range names {
		go func() {
			m, err := g.nc.RequestWithContext(ctx, NodeSubject(name), data)
			if err != nil {
				parts <- part{err: name + ": " + err.Error()}
				return
			}
			var rp reply
			var list struct {
				Sessions []json.RawMessage `json:"sessions"`
			}
			if json.Unmarshal(m.Data, &rp) != nil || rp.Status != 200 || json.Unmarshal(rp.Body, &list) != nil {
				parts <- part{err: name + ": a malformed answer"}
				return
			}
			parts <- part{sessions: list.Sessions}
		}()
	}
	all := []json.RawMessage{}
	var missing []string
	for range names {
		p := <-parts
		all = append(all, p.sessions...)
		if p.err != "" {
			missing = append(missing, p.err)
		}
	}
	body := map[string]any{"sessions": all}
	if len(missing) > 0 {
		sort.Strings(missing)
		body["unreachable"] = missing
	}
	writeJSON(w, 200, mustJSON(body))
}

type httpDiscard struct{}

func (httpDiscard) Header() http.Header         { return http.Header{} }
func (httpDiscard) Write(p []byte) (int, error) { return len(p), nil }
func (httpDiscard) WriteHeader(int)             {}

func (g *Backend) sessionCall(w http.ResponseWriter, r *http.Request, tenant string) {
	if r.URL.Query().Has("stream") {
		writeJSON(w, 501, errorBody("streamed execs (?stream=1) are not offered through the cluster yet", nil))
		return
	}
	id, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/v1/sessions/"), "/")
	notFound := func() { writeJSON(w, 404, errorBody("no such session", nil)) }
	if !validKey(id) || !safePath(r.URL.Path) {
		notFound()
		return
	}
	rec, ok := g.recs.get(id)
	if !ok {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		e, err := g.b.sessions.Get(ctx, id)
		cancel()
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			notFound()
			return
		case err != nil:
			unavailable(w, "the cluster cannot be reached: "+err.Error())
			return
		case json.Unmarshal(e.Value(), &rec) != nil:
			notFound()
			return
		}
		g.recs.put(id, rec)
	}
	if rec.Tenant != tenant {
		notFound() // another tenant's is not there for this one
		return
	}
	body, ok, err := readBounded(r, g.cfg.MaxRequest)
	if err != nil || !ok {
		writeJSON(w, 413, errorBody(fmt.Sprintf("body over the cluster's max_request (%d bytes)", g.cfg.MaxRequest), nil))
		return
	}
	rp, ok := g.forward(w, r, tenant, rec, body)
	if !ok {
		return
	}
	// A node that restarted (or came back from a fence) since the
	// session was made does not hold it, and answers 404: say how it
	// ended instead. The answer names the incarnation that gave it: the
	// node's own word, not its heartbeat in the cluster, which a
	// restarted node may not have stored yet when it already answers.
	if rp.Status == http.StatusNotFound && rec.Incarnation != "" && rp.Incarnation != rec.Incarnation {
		g.sessionGone(w, rec)
		return
	}
	writeReply(w, rp)
}

// recCache keeps sessions' records (node, tenant, incarnation), which
// never change while a session lives: an exec then reads none from the
// cluster. A record no longer true (the session ended) only sends the
// request to a node that answers for it. Bounded: full, it starts again.
type recCache struct {
	mu sync.Mutex
	m  map[string]sessionRec
}

const maxCachedRecs = 1 << 16

func (c *recCache) get(id string) (sessionRec, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.m[id]
	return r, ok
}

func (c *recCache) put(id string, r sessionRec) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCachedRecs {
		c.m = map[string]sessionRec{}
	}
	c.m[id] = r
}

// Metrics writes the cluster's lines in Prometheus' text format.
func (g *Backend) Metrics(w io.Writer) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if s, err := g.js.Stream(ctx, StreamName); err == nil {
		if info, err := s.Info(ctx); err == nil {
			fmt.Fprintf(w, "# TYPE stockade_cluster_queue_messages gauge\nstockade_cluster_queue_messages %d\n", info.State.Msgs)
		}
		if c, err := s.Consumer(ctx, ConsumerName); err == nil {
			if ci, err := c.Info(ctx); err == nil {
				fmt.Fprintf(w, "# TYPE stockade_cluster_queue_pending gauge\nstockade_cluster_queue_pending %d\n", ci.NumPending)
				fmt.Fprintf(w, "# TYPE stockade_cluster_queue_ack_pending gauge\nstockade_cluster_queue_ack_pending %d\n", ci.NumAckPending)
			}
		}
	}
	states := map[string]int{}
	free, ready := 0, 0
	for _, hb := range g.nodes(ctx) {
		states[hb.State]++
		if hb.State == StateUp {
			free += hb.Free
			ready += hb.PoolReady
		}
	}
	fmt.Fprintf(w, "# TYPE stockade_cluster_nodes gauge\n")
	for _, s := range []string{StateUp, StateDraining, StateFenced, StateStopped, "lost"} {
		fmt.Fprintf(w, "stockade_cluster_nodes{state=%q} %d\n", s, states[s])
	}
	fmt.Fprintf(w, "# TYPE stockade_cluster_free_slots gauge\nstockade_cluster_free_slots %d\n", free)
	fmt.Fprintf(w, "# TYPE stockade_cluster_pool_ready gauge\nstockade_cluster_pool_ready %d\n", ready)
	for _, c := range []struct {
		name string
		v    *atomic.Int64
	}{{"runs_submitted", &g.submitted}, {"runs_duplicate", &g.duplicates}, {"runs_refused", &g.refused},
		{"runs_host_lost", &g.hostLost}, {"runs_expired", &g.expired}, {"runs_result_gone", &g.resultsGone}} {
		fmt.Fprintf(w, "# TYPE stockade_cluster_%s_total counter\nstockade_cluster_%s_total %s\n", c.name, c.name, strconv.FormatInt(c.v.Load(), 10))
	}
	g.queueWait.write(w, "stockade_cluster_queue_wait_seconds", "time from a run's publish to its claim by a node (or its expiry), for this gateway's runs")
}
