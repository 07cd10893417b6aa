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

// Done-when 5: a rolling restart of the whole cluster during N runs, as
// an upgrade does it: host by host, its NATS server restarted (and caught
// up), then its stockade drained (SIGTERM) and started again, with a
// session on every host. Every run answers ok, none is lost, none starts
// twice, no host fences; each session answers until its own host's drain
// and ends shutdown with it, never ok after.
func TestClusterRollingRestartLosesNothing(t *testing.T) {
	f := newFixture(t, 3)
	for _, h := range f.hosts {
		f.startNode(h)
	}
	ctx, cancel := context.WithTimeout(context.Background(), proctest.Budget(t, 5*time.Minute))
	defer cancel()
	sessions := map[string]string{} // host -> session
	for i := 0; i < 60 && len(sessions) < len(f.hosts); i++ {
		id, node := f.newSession(ctx, "tenant-a")
		if _, has := sessions[node]; has {
			f.do(ctx, "tenant-a", "", "DELETE", "/v1/sessions/"+id, nil)
			continue
		}
		sessions[node] = id
	}
	if len(sessions) < len(f.hosts) {
		t.Fatalf("sessions on %d hosts only in 60 tries", len(sessions))
	}
	// The runs are spread over the roll (15 to 60 s here); once it is
	// over the rest go at once.
	const n = 18
	answers := make([]runAnswer, n)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	submitted := make(chan struct{})
	go func() {
		defer close(submitted)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, h, m := f.do(ctx, "tenant-a", fmt.Sprintf("rr%d", i), "POST", "/v1/run",
					map[string]any{"code": fmt.Sprintf("import time; time.sleep(1); print(%d)", i)})
				answers[i] = runAnswer{st, h.Get(RunIDHeader), m}
			}()
			select {
			case <-stop:
			case <-time.After(time.Second):
			}
		}
	}()
	fenced := func(h *host) {
		if strings.Contains(h.serveLog.String(), "cluster: fenced") {
			t.Errorf("%s fenced during the rolling restart:\n%s", h.name, h.serveLog.String())
		}
	}
	for _, h := range f.hosts {
		sid := sessions[h.name]
		syscall.Kill(h.nats.Cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-h.nats.Done():
		case <-time.After(proctest.Budget(t, 30*time.Second)):
			t.Fatalf("%s's nats-server did not stop", h.name)
		}
		time.Sleep(time.Second)
		f.startNATS(h)
		// Until it has caught up: the next step goes only when the
		// cluster again has all three.
		deadline := time.Now().Add(proctest.Budget(t, 60*time.Second))
		for !f.allCurrent() {
			if time.Now().After(deadline) {
				t.Fatalf("%s's nats-server never caught up", h.name)
			}
			time.Sleep(200 * time.Millisecond)
		}
		// The session outlived its NATS server's restart: still ok.
		if st, _, m := f.do(ctx, "tenant-a", "", "POST", "/v1/sessions/"+sid+"/exec", map[string]any{"code": "print('before')"}); st != 200 || m["stdout"] != "before\n" {
			t.Errorf("%s's session after its NATS server's restart, before its drain: %d %v", h.name, st, m)
		}
		syscall.Kill(h.serve.Cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-h.serve.Done():
		case <-time.After(proctest.Budget(t, 60*time.Second)):
			t.Fatalf("%s did not stop:\n%s", h.name, h.serveLog.String())
		}
		fenced(h)
		st, _, m := f.do(ctx, "tenant-a", "", "POST", "/v1/sessions/"+sid+"/exec", map[string]any{"code": "print(1)"})
		if st != 410 || m["verdict"] != "shutdown" {
			t.Errorf("%s's session after its drain: %d %v, want 410 shutdown", h.name, st, m)
		}
		f.startNode(h)
	}
	close(stop)
	<-submitted
	wg.Wait()
	for _, h := range f.hosts {
		fenced(h)
	}
	for i, a := range answers {
		if a.status != 200 || a.body["verdict"] != "ok" || a.body["stdout"] != fmt.Sprintf("%d\n", i) {
			t.Errorf("run %d: %d %v", i, a.status, a.body)
		}
	}
	starts := f.auditStarts()
	if len(starts) != n {
		t.Errorf("%d runs started, want %d", len(starts), n)
	}
	for id, hosts := range starts {
		if len(hosts) != 1 {
			t.Errorf("run %s started on %v", id, hosts)
		}
	}
	for node, sid := range sessions {
		if st, _, m := f.do(ctx, "tenant-a", "", "GET", "/v1/sessions/"+sid, nil); st != 410 || m["verdict"] != "shutdown" {
			t.Errorf("%s's session at the end: %d %v", node, st, m)
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
