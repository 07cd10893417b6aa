package cluster

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/proctest"
)

// Done-when 6, first half: a gateway dies mid-request (its caller's
// request ends while the run waits in the queue); the caller resubmits
// with the same Idempotency-Key to another gateway: one execution, one
// result, the same run id.
func TestClusterResubmitToAnotherGatewayRunsOnce(t *testing.T) {
	f := newFixture(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), proctest.Budget(t, 2*time.Minute))
	defer cancel()
	// No node yet: the run waits in the queue while the first gateway's
	// request ends.
	first, stop := context.WithCancel(ctx)
	done := make(chan string, 1)
	go func() {
		_, h, _ := f.do(first, "tenant-a", "same-key", "POST", "/v1/run", map[string]any{"code": "print('once')"})
		done <- h.Get(RunIDHeader)
	}()
	id := RunID("tenant-a", "same-key")
	deadline := time.Now().Add(proctest.Budget(t, 30*time.Second))
	for {
		var m bytes.Buffer
		f.g.Metrics(&m)
		if bytes.Contains(m.Bytes(), []byte("stockade_cluster_queue_messages 1\n")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run never reached the queue:\n%s", m.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	f.g.Close()
	if got := <-done; got != id {
		t.Fatalf("the first gateway named the run %q, want %q", got, id)
	}
	// Another gateway.
	g2, err := NewBackend(ctx, f.gcfg)
	if err != nil {
		t.Fatal(err)
	}
	f.g = g2
	for _, h := range f.hosts {
		f.startNode(h)
	}
	st, h, m := f.do(ctx, "tenant-a", "same-key", "POST", "/v1/run", map[string]any{"code": "print('once')"})
	if st != 200 || m["verdict"] != "ok" || m["stdout"] != "once\n" || h.Get(RunIDHeader) != id {
		t.Fatalf("the resubmission: %d %v %v", st, h, m)
	}
	if starts := f.auditStarts(); len(starts) != 1 || len(starts[id]) != 1 {
		t.Errorf("starts: %v, want the one run once", starts)
	}
}

// Done-when 6, second half: a full queue answers 503 with Retry-After,
// and nothing is enqueued past the bound.
func TestClusterFullQueueAnswers503(t *testing.T) {
	const bound = 3
	f := newFixtureWith(t, 1, func(c *Config) { c.QueueMax = bound })
	ctx, cancel := context.WithTimeout(context.Background(), proctest.Budget(t, time.Minute))
	defer cancel()
	// No node: every run waits. A refused request is answered at once; a
	// queued one's wait goes on (a caller who leaves does not end it: the
	// run stays queued) until the fixture's connection closes.
	refused := 0
	for i := range bound + 3 {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("POST", "/v1/run", bytes.NewReader([]byte(`{"code":"print(1)"}`))).WithContext(ctx)
		served := make(chan struct{})
		go func() { f.g.Serve(w, r, "tenant-a", fmt.Sprintf("q%d", i)); close(served) }()
		// Queued (the stream holds one more) or refused (answered).
		deadline := time.Now().Add(proctest.Budget(t, 30*time.Second))
		for f.queued(ctx) != i+1-refused {
			select {
			case <-served:
			case <-time.After(20 * time.Millisecond):
				if time.Now().After(deadline) {
					t.Fatalf("run %d: neither queued nor answered", i)
				}
				continue
			}
			if w.Code != 503 || w.Header().Get("Retry-After") == "" {
				t.Errorf("run %d: %d %q, want 503 with Retry-After", i, w.Code, w.Body.String())
			}
			refused++
			break
		}
	}
	if refused != 3 {
		t.Errorf("%d runs refused, want 3 past the bound of %d", refused, bound)
	}
	var m bytes.Buffer
	f.g.Metrics(&m)
	if !bytes.Contains(m.Bytes(), []byte(fmt.Sprintf("stockade_cluster_queue_messages %d\n", bound))) ||
		!bytes.Contains(m.Bytes(), []byte("stockade_cluster_runs_refused_total 3\n")) {
		t.Errorf("metrics after the refusals:\n%s", m.String())
	}
}

// queued is the messages in the work stream.
func (f *fixture) queued(ctx context.Context) int {
	s, err := f.g.js.Stream(ctx, StreamName)
	if err != nil {
		return -1
	}
	info, err := s.Info(ctx)
	if err != nil {
		return -1
	}
	return int(info.State.Msgs)
}
