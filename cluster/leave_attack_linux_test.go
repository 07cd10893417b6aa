package cluster

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/proctest"
)

// A tenant's max_runs is counted by the gateway while Backend.Serve
// answers the run. A tenant that sends a run and hangs up at once left a
// run in the cluster's queue that went on to make its result, while
// Serve returned at once and gave the count back: submit-and-leave, over
// and over, put any number of one tenant's runs in the queue (queue_max:
// every other tenant refused) and their results in the bounded results
// bucket (every other tenant's evicted). Serve now waits for the run it
// put in the cluster to be answered (here: expired, no node takes it),
// its answer unsent, so that the count is held as long as the run is.
func TestAttackSubmitAndLeaveEvadesMaxRuns(t *testing.T) {
	f := newFixtureWith(t, 1, func(c *Config) { c.QueueWait = Duration(3 * time.Second) })
	ctx, cancel := context.WithTimeout(context.Background(), proctest.Budget(t, time.Minute))
	defer cancel()
	// The caller hangs up once the run is in the queue (its id header set).
	callerCtx, hangUp := context.WithCancel(ctx)
	defer hangUp()
	r := httptest.NewRequest("POST", "/v1/run", strings.NewReader(`{"code":"print(1)"}`)).WithContext(callerCtx)
	w := httptest.NewRecorder()
	served := make(chan struct{})
	go func() { defer close(served); f.g.Serve(w, r, "leaver", "") }()
	work, err := f.g.js.Stream(ctx, StreamName)
	if err != nil {
		t.Fatal(err)
	}
	for {
		info, err := work.Info(ctx)
		if err == nil && info.State.Msgs > 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the run never reached the queue")
		case <-time.After(20 * time.Millisecond):
		}
	}
	hangUp()
	select {
	case <-served:
	case <-ctx.Done():
		t.Fatal("Serve never returned")
	}
	id := w.Header().Get(RunIDHeader)
	if id == "" {
		t.Fatalf("no run id: %d %s", w.Code, w.Body)
	}
	if callerCtx.Err() == nil {
		t.Fatal("the caller never hung up")
	}
	// When Serve returns, the run is over: not still in the queue,
	// making a result with nobody's count held for it.
	st, _, m := f.do(ctx, "leaver", "", "GET", "/v1/runs/"+id, nil)
	if st != 200 || m["verdict"] != "expired" {
		t.Errorf("the run once Serve returned for its caller who hung up: %d %v, want it answered (verdict expired), not still queued", st, m)
	}
}
