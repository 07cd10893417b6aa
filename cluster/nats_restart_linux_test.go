package cluster

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/proctest"
)

// Done-when 5, first half: a rolling restart of the three NATS servers
// during N runs: every run answers ok, none is lost, none starts twice.
func TestClusterRollingNATSRestartLosesNothing(t *testing.T) {
	f := newFixture(t, 3)
	for _, h := range f.hosts {
		f.startNode(h)
	}
	ctx, cancel := context.WithTimeout(context.Background(), proctest.Budget(t, 4*time.Minute))
	defer cancel()
	const n = 24
	answers := make([]runAnswer, n)
	var wg sync.WaitGroup
	stopSubmitting := make(chan struct{})
	go func() {
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, h, m := f.do(ctx, "tenant-a", fmt.Sprintf("n%d", i), "POST", "/v1/run", map[string]any{"code": fmt.Sprintf("print(%d)", i)})
				answers[i] = runAnswer{st, h.Get(RunIDHeader), m}
			}()
			select {
			case <-stopSubmitting:
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	for _, h := range f.hosts {
		syscall.Kill(h.nats.Cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-h.nats.Done():
		case <-time.After(proctest.Budget(t, 30*time.Second)):
			t.Fatalf("%s's nats-server did not stop", h.name)
		}
		time.Sleep(time.Second)
		f.startNATS(h)
		// Until it has caught up: the next one goes only when the
		// cluster again has all three.
		deadline := time.Now().Add(proctest.Budget(t, 60*time.Second))
		for !f.allCurrent() {
			if time.Now().After(deadline) {
				t.Fatalf("%s's nats-server never caught up", h.name)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	close(stopSubmitting)
	time.Sleep(600 * time.Millisecond)
	wg.Wait()
	for i, a := range answers {
		if a.status != 200 || a.body["verdict"] != "ok" || a.body["stdout"] != fmt.Sprintf("%d\n", i) {
			t.Errorf("run %d: %d %v", i, a.status, a.body)
		}
	}
	// Nor did any host take NATS's restarts for a partition.
	for _, h := range f.hosts {
		if strings.Contains(h.serveLog.String(), "cluster: fenced") {
			t.Errorf("%s fenced during the rolling restart:\n%s", h.name, h.serveLog.String())
		}
	}
	if len(f.auditStarts()) != n {
		t.Errorf("%d runs started, want %d", len(f.auditStarts()), n)
	}
	for id, hosts := range f.auditStarts() {
		if len(hosts) != 1 {
			t.Errorf("run %s started on %v", id, hosts)
		}
	}
}

// allCurrent says whether every stream of the cluster (the work stream
// and the buckets) has a leader and every replica current again.
func (f *fixture) allCurrent() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for _, name := range []string{StreamName, "KV_" + BucketClaims, "KV_" + BucketResults, "KV_" + BucketNodes, "KV_" + BucketSession} {
		s, err := f.g.js.Stream(ctx, name)
		if err != nil {
			return false
		}
		info, err := s.Info(ctx)
		if err != nil || info.Cluster == nil || info.Cluster.Leader == "" || len(info.Cluster.Replicas) != len(f.hosts)-1 {
			return false
		}
		for _, r := range info.Cluster.Replicas {
			if !r.Current || r.Offline {
				return false
			}
		}
	}
	return true
}
