package cluster

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/proctest"
)

// Done-when 5, the drain (one host; not yet the rolling drain of every
// host nor the NATS restart): SIGTERM to a host with a run in flight and a
// session: the run finishes and answers ok, the host takes nothing new,
// later runs go elsewhere, and once it stopped its session answers 410
// ended with verdict shutdown, never lost and never ok.
func TestClusterDrainedHostEndsSessionsShutdown(t *testing.T) {
	f := newFixture(t, 2)
	for _, h := range f.hosts {
		f.startNode(h)
	}
	ctx, cancel := context.WithTimeout(context.Background(), proctest.Budget(t, 3*time.Minute))
	defer cancel()
	sid, node := f.newSession(ctx, "tenant-a")
	victim := f.hostNamed(node)
	if st, _, m := f.do(ctx, "tenant-a", "", "POST", "/v1/sessions/"+sid+"/exec", map[string]any{"code": "print(1)"}); st != 200 {
		t.Fatalf("exec: %d %v", st, m)
	}
	// Runs until one is in flight on the victim.
	results := make(chan runAnswer, 8)
	var onVictim string
	for i := 0; i < 8 && onVictim == ""; i++ {
		k := fmt.Sprintf("d%d", i)
		go func() {
			st, h, m := f.do(ctx, "tenant-a", k, "POST", "/v1/run", map[string]any{"code": "import time; time.sleep(3); print('drained')"})
			results <- runAnswer{st, h.Get(RunIDHeader), m}
		}()
		deadline := time.Now().Add(proctest.Budget(t, 30*time.Second))
		for f.claimer(RunID("tenant-a", k)) == "" && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if f.claimer(RunID("tenant-a", k)) == victim.name {
			onVictim = RunID("tenant-a", k)
		}
	}
	if onVictim == "" {
		t.Fatal("no run landed on the victim")
	}
	syscall.Kill(victim.serve.Cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-victim.serve.Done():
	case <-time.After(proctest.Budget(t, 60*time.Second)):
		t.Fatalf("the drained host did not stop:\n%s", victim.serveLog.String())
	}
	// Its run finished in the grace and answered ok.
	st, _, m := f.do(ctx, "tenant-a", "", "GET", "/v1/runs/"+onVictim, nil)
	if st != 200 || m["verdict"] != "ok" || m["stdout"] != "drained\n" {
		t.Errorf("the run in flight on the drained host: %d %v", st, m)
	}
	if hb := f.heartbeat(victim.name); hb.State != StateStopped {
		t.Errorf("the drained host's last heartbeat: %+v, want state stopped", hb)
	}
	// New runs go to the other host.
	got := f.submitAll(ctx, "tenant-a", []string{"after1", "after2"}, func(string) string { return "print('x')" })
	for _, a := range got {
		if a.body["verdict"] != "ok" || a.body["node"] == victim.name {
			t.Errorf("a run after the drain: %d %v", a.status, a.body)
		}
	}
	st, _, m = f.do(ctx, "tenant-a", "", "POST", "/v1/sessions/"+sid+"/exec", map[string]any{"code": "print(2)"})
	if st != 410 || m["state"] != "ended" || m["verdict"] != "shutdown" {
		t.Errorf("the drained host's session: %d %v, want 410 ended shutdown", st, m)
	}
	// And so it says once the host is back (an upgrade's restart): the
	// new process does not hold it, and does not answer 404 for it.
	f.startNode(victim)
	st, _, m = f.do(ctx, "tenant-a", "", "POST", "/v1/sessions/"+sid+"/exec", map[string]any{"code": "print(3)"})
	if st != 410 || m["state"] != "ended" || m["verdict"] != "shutdown" {
		t.Errorf("the drained host's session after its restart: %d %v, want 410 ended shutdown", st, m)
	}
}

// Done-when 5, second half: a rolling drain of every host (SIGTERM, then
// the host back, as an upgrade does) during N runs, with a session on
// each: every run answers ok, none lost, none started twice; each session
// ends shutdown with its host's drain, never ok after it.
func TestClusterRollingDrainLosesNothing(t *testing.T) {
	f := newFixture(t, 3)
	for _, h := range f.hosts {
		f.startNode(h)
	}
	ctx, cancel := context.WithTimeout(context.Background(), proctest.Budget(t, 4*time.Minute))
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
	const n = 18
	answers := make([]runAnswer, n)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	go func() {
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, h, m := f.do(ctx, "tenant-a", fmt.Sprintf("rd%d", i), "POST", "/v1/run",
					map[string]any{"code": fmt.Sprintf("import time; time.sleep(1); print(%d)", i)})
				answers[i] = runAnswer{st, h.Get(RunIDHeader), m}
			}()
			select {
			case <-stop:
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	for _, h := range f.hosts {
		sid := sessions[h.name]
		syscall.Kill(h.serve.Cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-h.serve.Done():
		case <-time.After(proctest.Budget(t, 60*time.Second)):
			t.Fatalf("%s did not stop:\n%s", h.name, h.serveLog.String())
		}
		st, _, m := f.do(ctx, "tenant-a", "", "POST", "/v1/sessions/"+sid+"/exec", map[string]any{"code": "print(1)"})
		if st != 410 || m["verdict"] != "shutdown" {
			t.Errorf("%s's session after its drain: %d %v, want 410 shutdown", h.name, st, m)
		}
		f.startNode(h)
	}
	close(stop)
	time.Sleep(600 * time.Millisecond)
	wg.Wait()
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
