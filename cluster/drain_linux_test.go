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

// --drain-sessions: a drained host's sessions get that long to end by
// themselves, their owners still reaching them; those still alive then
// end with verdict shutdown. When they all end sooner, the host stops
// sooner.
func TestClusterDrainSessionsGivesSessionsTimeToEnd(t *testing.T) {
	f := newFixture(t, 1)
	h := f.hosts[0]
	f.startNode(h, "--drain-sessions", "8s")
	ctx, cancel := context.WithTimeout(context.Background(), proctest.Budget(t, 3*time.Minute))
	defer cancel()
	drain := func() {
		t.Helper()
		syscall.Kill(h.serve.Cmd.Process.Pid, syscall.SIGTERM)
		deadline := time.Now().Add(proctest.Budget(t, 30*time.Second))
		for !strings.Contains(h.serveLog.String(), "cluster: draining") {
			if time.Now().After(deadline) {
				t.Fatalf("no drain:\n%s", h.serveLog.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	exec := func(sid, code string) (int, map[string]any) {
		st, _, m := f.do(ctx, "tenant-a", "", "POST", "/v1/sessions/"+sid+"/exec", map[string]any{"code": code})
		return st, m
	}
	stopped := func() {
		t.Helper()
		select {
		case <-h.serve.Done():
		case <-time.After(proctest.Budget(t, 60*time.Second)):
			t.Fatalf("the drained host did not stop:\n%s", h.serveLog.String())
		}
	}
	a, _ := f.newSession(ctx, "tenant-a")
	b, _ := f.newSession(ctx, "tenant-a")
	drain()
	// Draining, the sessions still answer their owners.
	for _, sid := range []string{a, b} {
		if st, m := exec(sid, "print('draining')"); st != 200 || m["stdout"] != "draining\n" {
			t.Errorf("a session during the drain: %d %v", st, m)
		}
	}
	select {
	case <-h.serve.Done():
		t.Fatalf("the host stopped with its sessions alive, before --drain-sessions:\n%s", h.serveLog.String())
	default:
	}
	if hb := f.heartbeat(h.name); hb.State != StateDraining {
		t.Errorf("the heartbeat during the drain: %+v", hb)
	}
	// a ends by itself; b outlives the period and is ended.
	if st, _, m := f.do(ctx, "tenant-a", "", "DELETE", "/v1/sessions/"+a, nil); st != 200 {
		t.Errorf("DELETE during the drain: %d %v", st, m)
	}
	stopped()
	if log := h.serveLog.String(); !strings.Contains(log, "--drain-sessions 8s over with 1 sessions alive") {
		t.Errorf("the log does not say the one session left was ended at the period's end:\n%s", log)
	}
	if st, m := exec(b, "print(2)"); st != 410 || m["verdict"] != "shutdown" {
		t.Errorf("the session that outlived --drain-sessions: %d %v, want 410 shutdown", st, m)
	}
	// A period far longer than the test's budget: the host stops once its
	// one session ended, not when the period does.
	f.startNode(h, "--drain-sessions", "10m")
	c, _ := f.newSession(ctx, "tenant-a")
	drain()
	if st, m := exec(c, "print('still')"); st != 200 || m["stdout"] != "still\n" {
		t.Errorf("the session during the second drain: %d %v", st, m)
	}
	if st, _, m := f.do(ctx, "tenant-a", "", "DELETE", "/v1/sessions/"+c, nil); st != 200 {
		t.Errorf("DELETE during the second drain: %d %v", st, m)
	}
	stopped()
	if strings.Contains(h.serveLog.String(), "over with") {
		t.Errorf("the second drain ended a session:\n%s", h.serveLog.String())
	}
}
