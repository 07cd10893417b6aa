package cluster

import (
	"context"
	"fmt"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/proctest"
)

// Done-when 4: a host partitioned for twice the grace fences itself
// before any gateway answers host_lost for its runs; after the heal its
// old session answers 410, its late results are fetchable, and no run
// started twice.
func TestClusterPartitionedHostFencesBeforeLost(t *testing.T) {
	f := newFixture(t, 3)
	for _, h := range f.hosts {
		f.startNode(h)
	}
	victim := f.hosts[2]
	ctx, cancel := context.WithTimeout(context.Background(), proctest.Budget(t, 4*time.Minute))
	defer cancel()
	// A session on the victim.
	var sid string
	for range 30 {
		id, node := f.newSession(ctx, "tenant-a")
		if node == victim.name {
			sid = id
			break
		}
		f.do(ctx, "tenant-a", "", "DELETE", "/v1/sessions/"+id, nil)
	}
	if sid == "" {
		t.Fatal("no session landed on the victim in 30 tries")
	}
	if st, _, m := f.do(ctx, "tenant-a", "", "POST", "/v1/sessions/"+sid+"/exec", map[string]any{"code": "print(7)"}); st != 200 {
		t.Fatalf("exec on the victim: %d %v", st, m)
	}
	// Long runs in every slot.
	type answer struct {
		runAnswer
		at time.Time
	}
	keys := []string{"p0", "p1", "p2", "p3", "p4", "p5"}
	answers := make([]answer, len(keys))
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, h, m := f.do(ctx, "tenant-a", k, "POST", "/v1/run", map[string]any{"code": "import time; time.sleep(7); print('late')"})
			answers[i] = answer{runAnswer{st, h.Get(RunIDHeader), m}, time.Now()}
		}()
	}
	deadline := time.Now().Add(proctest.Budget(t, 60*time.Second))
	for {
		onVictim := 0
		for _, k := range keys {
			if f.claimer(RunID("tenant-a", k)) == victim.name {
				onVictim++
			}
		}
		if onVictim > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the victim took no run")
		}
		time.Sleep(50 * time.Millisecond)
	}
	sh(t, "ip", "-n", f.hub, "link", "set", "vb"+victim.name, "down")
	cut := time.Now()
	wg.Wait()
	// The fence, from the victim's own log.
	m := regexp.MustCompile(`cluster: fenced at (\S+):`).FindStringSubmatch(victim.serveLog.String())
	if m == nil {
		t.Fatalf("the victim never fenced:\n%s", victim.serveLog.String())
	}
	fenced, err := time.Parse(time.RFC3339Nano, m[1])
	if err != nil {
		t.Fatal(err)
	}
	lost := map[string]bool{}
	for i, a := range answers {
		switch a.body["verdict"] {
		case "host_lost":
			lost[keys[i]] = true
			if a.body["node"] != victim.name {
				t.Errorf("run %s lost on %v", keys[i], a.body["node"])
			}
			if !fenced.Before(a.at) {
				t.Errorf("run %s answered host_lost at %v, before the victim fenced at %v", keys[i], a.at, fenced)
			}
		case "ok":
		default:
			t.Errorf("run %s: %d %v", keys[i], a.status, a.body)
		}
	}
	if len(lost) == 0 {
		t.Fatal("no run answered host_lost")
	}
	// Heal after twice the grace.
	if rest := 2*testGrace - time.Since(cut); rest > 0 {
		time.Sleep(rest)
	}
	sh(t, "ip", "-n", f.hub, "link", "set", "vb"+victim.name, "up")
	if st, _, m := f.do(ctx, "tenant-a", "", "POST", "/v1/sessions/"+sid+"/exec", map[string]any{"code": "print(8)"}); st != 410 {
		t.Errorf("the fenced host's session after the heal: %d %v, want 410", st, m)
	}
	// The late results arrive.
	for i, a := range answers {
		if !lost[keys[i]] {
			continue
		}
		deadline := time.Now().Add(proctest.Budget(t, 90*time.Second))
		for {
			st, _, m := f.do(ctx, "tenant-a", "", "GET", "/v1/runs/"+a.id, nil)
			if st == 200 && m["verdict"] == "ok" && m["stdout"] == "late\n" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("run %s: its late result never came: %d %v", keys[i], st, m)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	for id, hosts := range f.auditStarts() {
		if len(hosts) > 1 {
			t.Errorf("run %s started on %v", id, hosts)
		}
	}
	t.Logf("cut %v, fenced %v later; %d runs lost", cut.Format(time.RFC3339Nano), fenced.Sub(cut), len(lost))
	_ = fmt.Sprint
}
