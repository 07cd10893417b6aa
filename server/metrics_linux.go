package server

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stockade/stockade/api"
)

// metrics counts what the server did since it started, for GET
// /v1/metrics in Prometheus' text format. Nothing in it names a caller or
// a session: it is the operator's view, not an audit.
type metrics struct {
	mu              sync.Mutex
	runs            map[string]uint64 // by verdict
	execs           map[string]uint64 // by verdict
	sessionsCreated map[string]uint64 // by pool use: hit, miss
	sessionsEnded   map[string]uint64 // by verdict
	runSeconds      histogram
	execSeconds     histogram
	createSeconds   histogram
}

// latencyBuckets are the upper bounds (seconds) of every latency
// histogram: from a pool hit's few milliseconds to a long exec.
var latencyBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}

type histogram struct {
	counts []uint64 // per bucket, not cumulative; the last is +Inf
	sum    float64
	n      uint64
}

func (h *histogram) observe(d time.Duration) {
	if h.counts == nil {
		h.counts = make([]uint64, len(latencyBuckets)+1)
	}
	v := d.Seconds()
	i := sort.SearchFloat64s(latencyBuckets, v)
	h.counts[i]++
	h.sum += v
	h.n++
}

func newMetrics() *metrics {
	return &metrics{runs: map[string]uint64{}, execs: map[string]uint64{},
		sessionsCreated: map[string]uint64{}, sessionsEnded: map[string]uint64{}}
}

func (m *metrics) run(verdict string, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.runs[verdict]++
	m.runSeconds.observe(d)
}

func (m *metrics) exec(verdict api.Verdict, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.execs[string(verdict)]++
	m.execSeconds.observe(d)
}

func (m *metrics) sessionCreated(hit bool, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sessionsCreated[map[bool]string{true: "hit", false: "miss"}[hit]]++
	m.createSeconds.observe(d)
}

func (m *metrics) sessionEnded(v api.Verdict) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sessionsEnded[string(v)]++
}

// promWriter writes the text format: a HELP and TYPE line per family,
// then its samples.
type promWriter struct {
	w   io.Writer
	err error
}

func (p *promWriter) family(name, typ, help string) {
	p.printf("# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

func (p *promWriter) sample(name string, labels [][2]string, v float64) {
	var b strings.Builder
	b.WriteString(name)
	if len(labels) > 0 {
		b.WriteByte('{')
		for i, l := range labels {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(l[0] + "=" + strconv.Quote(l[1]))
		}
		b.WriteByte('}')
	}
	p.printf("%s %s\n", b.String(), strconv.FormatFloat(v, 'g', -1, 64))
}

func (p *promWriter) printf(format string, a ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, a...)
	}
}

func (p *promWriter) counterBy(name, help, label string, by map[string]uint64) {
	p.family(name, "counter", help)
	keys := make([]string, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		p.sample(name, [][2]string{{label, k}}, float64(by[k]))
	}
}

func (p *promWriter) histogram(name, help string, h histogram) {
	p.family(name, "histogram", help)
	var cum uint64
	for i, le := range latencyBuckets {
		if h.counts != nil {
			cum += h.counts[i]
		}
		p.sample(name+"_bucket", [][2]string{{"le", strconv.FormatFloat(le, 'g', -1, 64)}}, float64(cum))
	}
	p.sample(name+"_bucket", [][2]string{{"le", "+Inf"}}, float64(h.n))
	p.sample(name+"_sum", nil, h.sum)
	p.sample(name+"_count", nil, float64(h.n))
}

// writeMetrics writes every family, with the pools', sessions' and
// budget's state read now.
func (s *Server) writeMetrics(w io.Writer) error {
	p := &promWriter{w: w}
	pools := map[string]api.PoolStats{}
	var names []string
	for _, pr := range s.cfg.Profiles {
		names = append(names, pr.Name)
		pools[pr.Name] = s.pools[pr.Name].snapshot()
	}
	gauge := func(name, help string, v func(api.PoolStats) int, typ string) {
		p.family(name, typ, help)
		for _, n := range names {
			p.sample(name, [][2]string{{"profile", n}}, float64(v(pools[n])))
		}
	}
	gauge("stockade_pool_target", "Jails each profile's pool keeps prepared (--pool).", func(ps api.PoolStats) int { return ps.Target }, "gauge")
	gauge("stockade_pool_ready", "Jails prepared and waiting.", func(ps api.PoolStats) int { return ps.Ready }, "gauge")
	gauge("stockade_pool_preparing", "Jails being prepared.", func(ps api.PoolStats) int { return ps.Preparing }, "gauge")
	gauge("stockade_pool_hits_total", "Runs and sessions that took a prepared jail.", func(ps api.PoolStats) int { return ps.Hits }, "counter")
	gauge("stockade_pool_misses_total", "Runs and sessions that found the pool empty.", func(ps api.PoolStats) int { return ps.Misses }, "counter")
	gauge("stockade_pool_died_waiting_total", "Prepared jails that ended while waiting, discarded.", func(ps api.PoolStats) int { return ps.DiedWaiting }, "counter")
	gauge("stockade_pool_failed_total", "Jail set-ups of the pool that failed.", func(ps api.PoolStats) int { return ps.Failed }, "counter")
	gauge("stockade_pool_evicted_total", "Prepared jails given up to make room in the budget.", func(ps api.PoolStats) int { return ps.Evicted }, "counter")

	running, queued := s.gate.counts()
	p.family("stockade_runs_running", "gauge", "Requests holding a run slot (--concurrency).")
	p.sample("stockade_runs_running", nil, float64(running))
	p.family("stockade_runs_queued", "gauge", "Requests waiting for a run slot (--queue).")
	p.sample("stockade_runs_queued", nil, float64(queued))

	live, held := s.sessions.counts()
	p.family("stockade_sessions_live", "gauge", "Sessions whose interpreter runs.")
	p.sample("stockade_sessions_live", nil, float64(live))
	p.family("stockade_sessions_held", "gauge", "Sessions the server holds, live or ended and kept for their /work (--sessions counts these).")
	p.sample("stockade_sessions_held", nil, float64(held))

	mem, pids := s.budget.used()
	p.family("stockade_budget_memory_used_bytes", "gauge", "Memory limits of every live jail, added up.")
	p.sample("stockade_budget_memory_used_bytes", nil, float64(mem))
	p.family("stockade_budget_memory_max_bytes", "gauge", "--budget-memory (0: none).")
	p.sample("stockade_budget_memory_max_bytes", nil, float64(s.cfg.BudgetMemory))
	p.family("stockade_budget_pids_used", "gauge", "Pids limits of every live jail, added up.")
	p.sample("stockade_budget_pids_used", nil, float64(pids))
	p.family("stockade_budget_pids_max", "gauge", "--budget-pids (0: none).")
	p.sample("stockade_budget_pids_max", nil, float64(s.cfg.BudgetPids))

	m := s.metrics
	m.mu.Lock()
	defer m.mu.Unlock()
	p.counterBy("stockade_runs_total", "Runs of POST /v1/run, by verdict.", "verdict", m.runs)
	p.counterBy("stockade_execs_total", "Execs of sessions, by verdict.", "verdict", m.execs)
	p.counterBy("stockade_sessions_created_total", "Sessions made, by whether the pool had their jail.", "pool", m.sessionsCreated)
	p.counterBy("stockade_sessions_ended_total", "Sessions ended, by verdict.", "verdict", m.sessionsEnded)
	p.histogram("stockade_run_seconds", "POST /v1/run, from admission to the result.", m.runSeconds)
	p.histogram("stockade_exec_seconds", "Session execs, from the cell sent to its answer.", m.execSeconds)
	p.histogram("stockade_session_create_seconds", "POST /v1/sessions, from admission to the driver's first frame.", m.createSeconds)
	return p.err
}
