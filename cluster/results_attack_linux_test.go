package cluster

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/proctest"
)

// A tenant floods the cluster with runs whose outputs are near
// max_result, more than the JetStream store holds. The results bucket is
// bounded (results_max_bytes, well inside the store): its oldest results
// make room, the heartbeats go on being stored (no node fences), another
// tenant's run answers ok, and a flooded result that was dropped answers
// its own verdict, result_evicted — never host_lost for a live host,
// never "running" forever. Unbounded, the results fill the store, the
// heartbeat puts fail, and the node fences: one tenant's outage for all.
func TestAttackResultsFloodFillsStore(t *testing.T) {
	const (
		maxResult    = 200 << 10
		resultsBound = 1 << 20
		output       = 150_000 // bytes a flooded run prints
		floods       = 30      // 4.5 MB of results, past the 4 MB store
	)
	f := newFixtureLimits(t, 1, natsLimits{payload: "16MB", store: "4MB"}, func(c *Config) {
		c.MaxResult, c.ResultsMaxBytes = maxResult, resultsBound
	})
	h := f.hosts[0]
	f.startNode(h)
	ctx, cancel := context.WithTimeout(context.Background(), proctest.Budget(t, 4*time.Minute))
	defer cancel()
	var keys []string
	for i := range floods {
		keys = append(keys, fmt.Sprintf("flood%d", i))
	}
	answers := f.submitAll(ctx, "flooder", keys, func(string) string { return fmt.Sprintf("print('x' * %d)", output) })
	for i, a := range answers {
		v := a.body["verdict"]
		if a.status != 200 || v != "ok" && v != verdictEvicted {
			t.Errorf("flooded run %s: %d %.300v, want ok or %s", keys[i], a.status, a.body, verdictEvicted)
		}
	}
	// The heartbeats are still stored: two more after the flood (a
	// key's revision is the bucket's sequence: it changes when the key is
	// written).
	rev, stored := f.heartbeatRevision(ctx, h.name), 0
	for stored < 2 {
		select {
		case <-ctx.Done():
			t.Fatalf("%d heartbeats stored after the flood, want 2:\n%s", stored, tailOf(h.serveLog.String(), 3000))
		case <-time.After(200 * time.Millisecond):
		}
		if r := f.heartbeatRevision(ctx, h.name); r != rev && r != 0 {
			rev, stored = r, stored+1
		}
	}
	if strings.Contains(h.serveLog.String(), "cluster: fenced") {
		t.Errorf("the node fenced during the flood:\n%s", tailOf(h.serveLog.String(), 3000))
	}
	if hb := f.heartbeat(h.name); hb.State != StateUp {
		t.Errorf("the node's state after the flood: %q, want up", hb.State)
	}
	// Another tenant is served.
	if st, _, m := f.do(ctx, "tenant-b", "", "POST", "/v1/run", map[string]any{"code": "print('still served')"}); st != 200 || m["verdict"] != "ok" || m["stdout"] != "still served\n" {
		t.Errorf("another tenant's run after the flood: %d %v", st, m)
	}
	// The bucket held its bound; the flood's oldest results were dropped
	// and say so when asked for.
	s, err := f.g.js.Stream(ctx, "KV_"+BucketResults)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.MaxBytes != resultsBound || info.State.Bytes > resultsBound {
		t.Errorf("results bucket: max_bytes %d, holding %d bytes; want the bound %d held", info.Config.MaxBytes, info.State.Bytes, resultsBound)
	}
	verdicts := map[string]int{}
	for _, a := range answers {
		st, _, m := f.do(ctx, "flooder", "", "GET", "/v1/runs/"+a.id, nil)
		v, _ := m["verdict"].(string)
		if st != 200 {
			v = fmt.Sprintf("status %d", st)
		}
		verdicts[v]++
	}
	if verdicts[verdictEvicted] == 0 || verdicts["ok"] == 0 || verdicts[verdictEvicted]+verdicts["ok"] != floods {
		t.Errorf("the flood's results asked for again: %v; want some ok (the newest), some %s, nothing else", verdicts, verdictEvicted)
	}
}

// heartbeatRevision is the revision of node's heartbeat (0: none read).
func (f *fixture) heartbeatRevision(ctx context.Context, node string) uint64 {
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	e, err := f.g.b.nodes.Get(gctx, node)
	if err != nil {
		return 0
	}
	return e.Revision()
}

// A session's answer that NATS will not carry (over its max_payload) was
// dropped by the node without a word, and its caller waited
// request_timeout for it. A configuration that makes such answers is
// refused at connect; and when the server's max_payload shrinks under a
// running node (nats.conf changed, the server restarted), the answer too
// large is replaced by a small 502 that says why, at once.
func TestAttackSessionAnswerOverMaxPayload(t *testing.T) {
	f := newFixtureWith(t, 1, func(c *Config) { c.MaxResult = 2 << 20 })
	h := f.hosts[0]
	ctx, cancel := context.WithTimeout(context.Background(), proctest.Budget(t, 3*time.Minute))
	defer cancel()
	// A max_result whose base64 is over the server's 16MB: refused.
	big := f.gcfg
	big.MaxResult = 12 << 20
	if g, err := NewBackend(ctx, big); err == nil || !strings.Contains(err.Error(), "raise max_payload") {
		if g != nil {
			g.Close()
		}
		t.Errorf("a gateway with max_result 12 MiB on a 16MB max_payload: %v, want refused with the fix", err)
	}
	f.startNode(h)
	sid, _ := f.newSession(ctx, "tenant-a")
	// The server comes back with a max_payload of 1MB; node and gateway
	// reconnect to it.
	syscall.Kill(h.nats.Cmd.Process.Pid, syscall.SIGTERM)
	<-h.nats.Done()
	f.nats.payload = "1MB"
	f.startNATS(h)
	for f.g.nc.MaxPayload() != 1<<20 || !strings.Contains(h.serveLog.String(), "reconnected to NATS") {
		select {
		case <-ctx.Done():
			t.Fatalf("no reconnect to the restarted server:\n%s", h.serveLog.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	// 900 kB of output: its answer, base64, is 1.2 MB.
	st, _, m := f.do(ctx, "tenant-a", "", "POST", "/v1/sessions/"+sid+"/exec", map[string]any{"code": "print('y' * 900000)"})
	if st != 502 || m["verdict"] != "answer_too_large" {
		t.Errorf("an exec whose answer is over max_payload: %d %.300v, want 502 answer_too_large", st, m)
	}
	// The session goes on.
	if st, _, m := f.do(ctx, "tenant-a", "", "POST", "/v1/sessions/"+sid+"/exec", map[string]any{"code": "print('small')"}); st != 200 || m["stdout"] != "small\n" {
		t.Errorf("the next exec: %d %v", st, m)
	}
}

// A result JetStream refuses for good (here: the node's max_result is
// larger than the gateway's, which sized the bucket's values) was tried
// again for result_ttl while its caller waited, then dropped with a line
// in the node's log only. The caller is answered result_not_stored at
// once, with JetStream's reason; the node logs it.
func TestAttackResultRefusedIsSaid(t *testing.T) {
	f := newFixtureWith(t, 1, func(c *Config) { c.MaxResult = 64 << 10 })
	f.nodeEdit = func(c *Config) { c.MaxResult = 512 << 10 }
	h := f.hosts[0]
	f.startNode(h)
	ctx, cancel := context.WithTimeout(context.Background(), proctest.Budget(t, 2*time.Minute))
	defer cancel()
	st, hdr, m := f.do(ctx, "tenant-a", "", "POST", "/v1/run", map[string]any{"code": "print('z' * 200000)"})
	if st != 200 || m["verdict"] != verdictNotStored || !strings.Contains(fmt.Sprint(m["error"]), "could not be stored") {
		t.Fatalf("a run whose result JetStream refuses: %d %.300v, want %s", st, m, verdictNotStored)
	}
	if st, _, m := f.do(ctx, "tenant-a", "", "GET", "/v1/runs/"+hdr.Get(RunIDHeader), nil); st != 200 || m["verdict"] != verdictNotStored {
		t.Errorf("asked for again: %d %.300v", st, m)
	}
	if !strings.Contains(h.serveLog.String(), "JetStream refused its result") {
		t.Errorf("the node's log does not say it:\n%s", h.serveLog.String())
	}
	// A result that fits is stored as ever.
	if st, _, m := f.do(ctx, "tenant-a", "", "POST", "/v1/run", map[string]any{"code": "print('fits')"}); st != 200 || m["verdict"] != "ok" || m["stdout"] != "fits\n" {
		t.Errorf("a small run: %d %v", st, m)
	}
}
