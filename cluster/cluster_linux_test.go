package cluster

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/proctest"
)

type runAnswer struct {
	status int
	id     string
	body   map[string]any
}

// submitAll submits runs (one per key; the same key twice is a
// resubmission) at once and returns every answer, in order.
func (f *fixture) submitAll(ctx context.Context, tenant string, keys []string, code func(key string) string) []runAnswer {
	out := make([]runAnswer, len(keys))
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, h, m := f.do(ctx, tenant, k, "POST", "/v1/run", map[string]any{"code": code(k)})
			out[i] = runAnswer{st, h.Get(RunIDHeader), m}
		}()
	}
	wg.Wait()
	return out
}

// Done-when 1: N runs over three hosts, a fifth submitted twice: every id
// has exactly one start (the union of the hosts' audit logs) and one
// result, and every host took work.
func TestClusterRunsOnceAcrossHosts(t *testing.T) {
	f := newFixture(t, 3)
	for _, h := range f.hosts {
		f.startNode(h)
	}
	const n = 15
	var keys []string
	for i := range n {
		keys = append(keys, fmt.Sprintf("k%d", i))
	}
	keys = append(keys, keys[:n/5]...) // a fifth, twice
	ctx, cancel := context.WithTimeout(context.Background(), proctest.Budget(t, 3*time.Minute))
	defer cancel()
	answers := f.submitAll(ctx, "tenant-a", keys, func(k string) string {
		return fmt.Sprintf("import time; time.sleep(0.3); print(%q)", k)
	})
	byID := map[string]string{}
	for i, a := range answers {
		if a.status != 200 || a.body["verdict"] != "ok" || a.body["stdout"] != keys[i]+"\n" {
			t.Fatalf("run %s: %d %v", keys[i], a.status, a.body)
		}
		if prev, ok := byID[keys[i]]; ok && prev != a.id {
			t.Errorf("run %s submitted twice got two ids %s and %s", keys[i], prev, a.id)
		}
		byID[keys[i]] = a.id
	}
	starts := f.auditStarts()
	took := map[string]int{}
	for k, id := range byID {
		if len(starts[id]) != 1 {
			t.Errorf("run %s (%s): started on %v, want exactly one host", k, id, starts[id])
		}
		for _, h := range starts[id] {
			took[h]++
		}
		if st := f.g.look(ctx, "tenant-a", id); st.result == nil {
			t.Errorf("run %s: no stored result", k)
		}
	}
	if len(starts) != n {
		t.Errorf("%d runs started across the hosts, want %d", len(starts), n)
	}
	for _, h := range f.hosts {
		if took[h.name] == 0 {
			t.Errorf("host %s took no work (%v)", h.name, took)
		}
	}
	// Another tenant, the same key: another run, and the first tenant's
	// id is not another tenant's to fetch.
	st, _, _ := f.do(ctx, "tenant-b", "", "GET", "/v1/runs/"+byID["k0"], nil)
	if st != 404 {
		t.Errorf("tenant-b fetching tenant-a's run: %d, want 404", st)
	}
	var metrics strings.Builder
	f.g.Metrics(&metrics)
	for _, want := range []string{`stockade_cluster_nodes{state="up"} 3`, fmt.Sprintf("stockade_cluster_runs_submitted_total %d", n),
		fmt.Sprintf("stockade_cluster_runs_duplicate_total %d", n/5), "stockade_cluster_queue_messages 0"} {
		if !strings.Contains(metrics.String(), want) {
			t.Errorf("metrics lack %q:\n%s", want, metrics.String())
		}
	}
}
