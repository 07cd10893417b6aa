package cluster

import (
	"context"
	"fmt"
	"strconv"
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
	// The queue wait of each run submitted (not of its duplicates) is
	// observed once its answer is written: soon after.
	waits := fmt.Sprintf("stockade_cluster_queue_wait_seconds_count %d\n", n)
	metrics := f.metrics()
	for deadline := time.Now().Add(proctest.Budget(t, 10*time.Second)); !strings.Contains(metrics, waits) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		metrics = f.metrics()
	}
	for _, want := range []string{`stockade_cluster_nodes{state="up"} 3`, `stockade_cluster_nodes{state="lost"} 0`,
		fmt.Sprintf("stockade_cluster_runs_submitted_total %d", n), fmt.Sprintf("stockade_cluster_runs_duplicate_total %d", n/5),
		"stockade_cluster_queue_messages 0", "stockade_cluster_queue_pending 0\n", "stockade_cluster_queue_ack_pending 0\n",
		"stockade_cluster_runs_host_lost_total 0\n", "stockade_cluster_runs_expired_total 0\n",
		"# TYPE stockade_cluster_queue_wait_seconds histogram\n", waits,
		fmt.Sprintf("stockade_cluster_queue_wait_seconds_bucket{le=\"+Inf\"} %d\n", n)} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q:\n%s", want, metrics)
		}
	}
	checkHistogram(t, metrics, "stockade_cluster_queue_wait_seconds", n)
	// Every node's free slots and ready jails, summed: 3 hosts of
	// --concurrency 2 (their beats may still count a run ending).
	if v := metricValue(metrics, "stockade_cluster_free_slots"); v < 0 || v > 6 {
		t.Errorf("free slots %v, want 0..6:\n%s", v, metrics)
	}
	if v := metricValue(metrics, "stockade_cluster_pool_ready"); v < 0 || v > 3 {
		t.Errorf("pool ready %v, want 0..3 (--pool 1 on 3 hosts):\n%s", v, metrics)
	}
}

// Metrics of a queue nobody takes from: a run waits (pending 1), then
// answers expired, counted, its wait in the histogram's top buckets.
func TestClusterMetricsQueuePendingAndExpired(t *testing.T) {
	f := newFixtureWith(t, 1, func(c *Config) { c.QueueWait = Duration(2 * time.Second) })
	ctx, cancel := context.WithTimeout(context.Background(), proctest.Budget(t, time.Minute))
	defer cancel()
	done := make(chan runAnswer, 1)
	go func() {
		st, h, m := f.do(ctx, "tenant-a", "e1", "POST", "/v1/run", map[string]any{"code": "print(1)"})
		done <- runAnswer{st, h.Get(RunIDHeader), m}
	}()
	deadline := time.Now().Add(proctest.Budget(t, 10*time.Second))
	for metricValue(f.metrics(), "stockade_cluster_queue_pending") != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the queued run is not pending:\n%s", f.metrics())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if a := <-done; a.status != 200 || a.body["verdict"] != "expired" {
		t.Fatalf("a run nobody took: %d %v", a.status, a.body)
	}
	m := f.metrics()
	for _, want := range []string{"stockade_cluster_runs_expired_total 1\n", "stockade_cluster_queue_wait_seconds_count 1\n",
		// It waited queue_wait (2 s) at least: in no bucket below 2.5 s.
		"stockade_cluster_queue_wait_seconds_bucket{le=\"1\"} 0\n", `stockade_cluster_nodes{state="up"} 0`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q:\n%s", want, m)
		}
	}
	checkHistogram(t, m, "stockade_cluster_queue_wait_seconds", 1)
}

func (f *fixture) metrics() string {
	var b strings.Builder
	f.g.Metrics(&b)
	return b.String()
}

// metricValue is the value of an unlabelled line, -1 when there is none.
func metricValue(metrics, name string) float64 {
	for _, line := range strings.Split(metrics, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			if x, err := strconv.ParseFloat(v, 64); err == nil {
				return x
			}
		}
	}
	return -1
}

// checkHistogram checks a Prometheus histogram's shape: cumulative
// buckets in rising order, the +Inf one equal to _count, which is n.
func checkHistogram(t *testing.T, metrics, name string, n int) {
	t.Helper()
	prev, buckets := -1.0, 0
	for _, line := range strings.Split(metrics, "\n") {
		if !strings.HasPrefix(line, name+"_bucket{") {
			continue
		}
		buckets++
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil || v < prev {
			t.Errorf("histogram %s: bucket line %q after %v", name, line, prev)
		}
		prev = v
	}
	if buckets < 2 || prev != float64(n) || metricValue(metrics, name+"_count") != float64(n) || metricValue(metrics, name+"_sum") < 0 {
		t.Errorf("histogram %s: %d buckets, last %v, want %d:\n%s", name, buckets, prev, n, metrics)
	}
}
