package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/gateway"
	"github.com/stockade/stockade/internal/certtest"
	"github.com/stockade/stockade/internal/proctest"
)

// BenchmarkClusterThroughput is make bench's (scripts/bench-cluster), not
// a test: runs/s through a real HTTPS gateway at 1, 2 and 3 hosts, each
// host's serve (and so its jails) in a v1 cpu cgroup of its own with the
// same quota (STOCKADE_BENCH_CPUS, default 0.25 CPU: three hosts' 0.75
// fit into what two shared cores give), the host counts interleaved
// round by round, the load and each host's throttling
// printed (v1 refuses a parent quota below a child's without a word:
// nr_throttled > 0 is the proof the quota held); then the gateway's added
// latency on a session exec: p50 through the gateway against p50 on the
// node's unix socket, alternated. One iteration does it all (-benchtime 1x).
func BenchmarkClusterThroughput(b *testing.B) {
	cpus := benchEnv("STOCKADE_BENCH_CPUS", 0.25)
	rounds := int(benchEnv("STOCKADE_BENCH_ROUNDS", 3))
	perMeasure := int(benchEnv("STOCKADE_BENCH_RUNS", 24))
	execs := int(benchEnv("STOCKADE_BENCH_EXECS", 200))
	f := newFixture(b, 3)
	// The jails' cgroups are children of the host's: their cpus must not
	// be above its quota (v1 refuses it), so the hosts serve a profile
	// of that many.
	xdg := filepath.Join(f.dir, "xdg")
	os.MkdirAll(filepath.Join(xdg, "stockade", "profiles"), 0o755)
	os.WriteFile(filepath.Join(xdg, "stockade", "profiles", "bench.toml"), fmt.Appendf(nil, "[limits]\ncpus = %g\n", cpus), 0o644)
	own := ownCPUCgroup(b)
	for _, h := range f.hosts {
		h.cgroup = filepath.Join(own, "stockade-bench-"+f.tag+"-"+h.name)
		if err := os.Mkdir(h.cgroup, 0o755); err != nil {
			b.Fatal(err)
		}
		quota := strconv.Itoa(int(cpus * 100000))
		os.WriteFile(filepath.Join(h.cgroup, "cpu.cfs_period_us"), []byte("100000"), 0o644)
		if err := os.WriteFile(filepath.Join(h.cgroup, "cpu.cfs_quota_us"), []byte(quota), 0o644); err != nil {
			b.Fatalf("%s: quota %s: %v", h.cgroup, quota, err)
		}
		if got, _ := os.ReadFile(filepath.Join(h.cgroup, "cpu.cfs_quota_us")); strings.TrimSpace(string(got)) != quota {
			b.Fatalf("%s: quota reads %q, wrote %s", h.cgroup, got, quota)
		}
		h.env = []string{"XDG_CONFIG_HOME=" + xdg}
	}
	b.Cleanup(func() {
		for _, h := range f.hosts {
			f.stopNode(h)
			for range 50 {
				if os.Remove(h.cgroup) == nil || os.IsNotExist(os.Remove(h.cgroup)) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	})
	gw := startBenchGateway(b, f)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()

	fmt.Printf("cluster throughput: %d runs of print(1) per measure through the gateway (HTTPS, loopback), %d in flight per host, each host %g CPU (cpu.cfs_quota_us %d / 100000), %d rounds interleaved\n",
		perMeasure, 4, cpus, int(cpus*100000), rounds)
	rates := map[int][]float64{}
	unthrottled := 0 // measures in which some host's quota never bound
	for r := range rounds {
		order := []int{1, 2, 3}
		for range r {
			order = append(order[1:], order[0])
		}
		for _, k := range order {
			f.hostsUp(k)
			before := make([]int64, k)
			for i := range k {
				before[i] = throttled(f.hosts[i].cgroup)
			}
			load := loadavg()
			natsBefore, selfBefore := f.natsCPU(), selfCPU()
			start := time.Now()
			ok := gw.runs(ctx, perMeasure, 4*k)
			el := time.Since(start)
			natsUsed, selfUsed := f.natsCPU()-natsBefore, selfCPU()-selfBefore
			var thr []string
			note := ""
			for i := range k {
				d := throttled(f.hosts[i].cgroup) - before[i]
				thr = append(thr, fmt.Sprintf("%s %d", f.hosts[i].name, d))
				if d <= 0 {
					note = " NOT THROTTLED: a quota did not bind, this row measures the machine"
				}
			}
			if note != "" {
				unthrottled++
			}
			rate := float64(ok) / el.Seconds()
			rates[k] = append(rates[k], rate)
			fmt.Printf("  round %d: %d host(s): %d/%d ok in %v: %.2f runs/s (load before %s; nr_throttled +: %s; outside the quotas, CPU a run: nats-servers %v, gateway and client %v)%s\n",
				r+1, k, ok, perMeasure, el.Round(time.Millisecond), rate, load, strings.Join(thr, ", "),
				(natsUsed / time.Duration(perMeasure)).Round(100*time.Microsecond), (selfUsed / time.Duration(perMeasure)).Round(100*time.Microsecond), note)
			if ok != perMeasure {
				b.Errorf("%d of %d runs ok", ok, perMeasure)
			}
		}
	}
	med := func(k int) float64 { s := slices.Clone(rates[k]); slices.Sort(s); return s[len(s)/2] }
	fmt.Printf("cluster throughput, medians: 1 host %.2f runs/s, 2 hosts %.2f (%.2fx), 3 hosts %.2f (%.2fx; target >= 2.5x); load now %s; measures with a host never throttled: %d of %d\n",
		med(1), med(2), med(2)/med(1), med(3), med(3)/med(1), loadavg(), unthrottled, 3*rounds)

	// The gateway's added latency: one host, a session through the
	// gateway and one on its unix socket, execs alternated.
	f.hostsUp(1)
	h := f.hosts[0]
	viaGW, direct := gw.session(ctx), unixSession(b, filepath.Join(h.dir, "s.sock"))
	var tg, td []time.Duration
	for range execs {
		tg = append(tg, viaGW())
		td = append(td, direct())
	}
	slices.Sort(tg)
	slices.Sort(td)
	p := func(s []time.Duration, q float64) time.Duration { return s[int(q*float64(len(s)-1))] }
	fmt.Printf("session exec of pass, %d each, alternated: through the gateway p50 %v p90 %v; on the node's unix socket p50 %v p90 %v; added p50 %v (target <= 2ms); load %s\n",
		execs, p(tg, .5).Round(10*time.Microsecond), p(tg, .9).Round(10*time.Microsecond), p(td, .5).Round(10*time.Microsecond),
		p(td, .9).Round(10*time.Microsecond), (p(tg, .5) - p(td, .5)).Round(10*time.Microsecond), loadavg())
}

func benchEnv(name string, def float64) float64 {
	if v, err := strconv.ParseFloat(os.Getenv(name), 64); err == nil && v > 0 {
		return v
	}
	return def
}

// ownCPUCgroup is this process's cgroup in the v1 cpu hierarchy.
func ownCPUCgroup(b testing.TB) string {
	data, _ := os.ReadFile("/proc/self/cgroup")
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && slices.Contains(strings.Split(parts[1], ","), "cpu") {
			dir := filepath.Join("/sys/fs/cgroup/cpu", parts[2])
			if _, err := os.Stat(filepath.Join(dir, "cpu.cfs_quota_us")); err == nil {
				return dir
			}
		}
	}
	b.Skip("no v1 cpu hierarchy with cpu.cfs_quota_us here: the per-host quota is v1's")
	return ""
}

func throttled(cg string) int64 {
	data, _ := os.ReadFile(filepath.Join(cg, "cpu.stat"))
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "nr_throttled "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return -1
}

// natsCPU is the CPU time the fixture's nats-servers used so far.
func (f *fixture) natsCPU() time.Duration {
	var d time.Duration
	for _, h := range f.hosts {
		if h.nats != nil {
			d += procCPU(h.nats.Cmd.Process.Pid)
		}
	}
	return d
}

// procCPU is a process's user and system time (/proc/PID/stat, in clock
// ticks of 100 Hz).
func procCPU(pid int) time.Duration {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:]) // from the state, field 3
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * 10 * time.Millisecond
}

// selfCPU is this process's CPU time: the gateway, its backend and the
// bench's client.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func loadavg() string {
	data, _ := os.ReadFile("/proc/loadavg")
	return strings.Join(strings.Fields(string(data))[:3], " ")
}

// hostsUp leaves the first k hosts serving and the others drained.
func (f *fixture) hostsUp(k int) {
	for i, h := range f.hosts {
		up := h.serve != nil && !exited(h.serve)
		switch {
		case i < k && !up:
			f.startNode(h, "--profile", "bench")
		case i >= k && up:
			f.stopNode(h)
		}
	}
}

func exited(p *proctest.Proc) bool {
	select {
	case <-p.Done():
		return true
	default:
		return false
	}
}

func (f *fixture) stopNode(h *host) {
	if h.serve == nil || exited(h.serve) {
		return
	}
	syscall.Kill(h.serve.Cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-h.serve.Done():
	case <-time.After(time.Minute):
		f.t.Fatalf("%s did not stop:\n%s", h.name, h.serveLog.String())
	}
}

type benchGateway struct {
	b      testing.TB
	url    string
	token  string
	client *http.Client
}

// startBenchGateway serves a real gateway (HTTPS, a bearer token) on
// loopback in front of the fixture's backend.
func startBenchGateway(b testing.TB, f *fixture) *benchGateway {
	ca := certtest.NewCA(b, "gateway CA")
	leaf := ca.Issue(b, &x509.Certificate{Subject: pkix.Name{CommonName: "gateway"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	certFile, keyFile, tenants := certtest.WriteFile(b, f.dir, "gw.pem", leaf.CertPEM, 0o644), certtest.WriteFile(b, f.dir, "gw-key.pem", leaf.KeyPEM, 0o600), filepath.Join(f.dir, "tenants.toml")
	token := strings.Repeat("b7", 20)
	os.WriteFile(tenants, []byte("[tenant.bench]\ntokens = [\""+token+"\"]\n"), 0o600)
	g, err := gateway.New(gateway.Config{TenantsFile: tenants, CertFile: certFile, KeyFile: keyFile}, f.g)
	if err != nil {
		b.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.Serve(ctx, l, time.Second) }()
	b.Cleanup(func() { cancel(); <-done })
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}, MaxIdleConnsPerHost: 64}, Timeout: 5 * time.Minute}
	b.Cleanup(c.CloseIdleConnections)
	return &benchGateway{b: b, url: "https://" + l.Addr().String(), token: token, client: c}
}

func (g *benchGateway) post(ctx context.Context, path string, body any) (int, map[string]any) {
	bb, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, "POST", g.url+path, bytes.NewReader(bb))
	req.Header.Set("Authorization", "Bearer "+g.token)
	req.Header.Set("Content-Type", "application/json")
	return doJSON(g.client, req)
}

func doJSON(c *http.Client, req *http.Request) (int, map[string]any) {
	resp, err := c.Do(req)
	if err != nil {
		return 0, map[string]any{"error": err.Error()}
	}
	defer resp.Body.Close()
	var m map[string]any
	json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

// runs submits n runs, at most inFlight at once, and counts those ok.
func (g *benchGateway) runs(ctx context.Context, n, inFlight int) int {
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	sem := make(chan struct{}, inFlight)
	for range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			st, m := g.post(ctx, "/v1/run", map[string]any{"code": "print(1)"})
			mu.Lock()
			defer mu.Unlock()
			if st == 200 && m["verdict"] == "ok" {
				ok++
			} else if ok == 0 {
				g.b.Logf("a run: %d %v", st, m)
			}
		}()
	}
	wg.Wait()
	return ok
}

// session makes a session through the gateway and returns a function
// that execs `pass` in it once and says how long that took.
func (g *benchGateway) session(ctx context.Context) func() time.Duration {
	st, m := g.post(ctx, "/v1/sessions", map[string]any{})
	id, _ := m["session_id"].(string)
	if st != 201 && st != 200 || id == "" {
		g.b.Fatalf("a session through the gateway: %d %v", st, m)
	}
	return func() time.Duration {
		t0 := time.Now()
		st, m := g.post(ctx, "/v1/sessions/"+id+"/exec", map[string]any{"code": "pass"})
		d := time.Since(t0)
		if st != 200 {
			g.b.Fatalf("exec through the gateway: %d %v", st, m)
		}
		return d
	}
}

// unixSession is session on a node's unix socket, as its local callers
// reach it.
func unixSession(b testing.TB, sock string) func() time.Duration {
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}, Timeout: time.Minute}
	b.Cleanup(c.CloseIdleConnections)
	post := func(path string, body any) (int, map[string]any) {
		bb, _ := json.Marshal(body)
		req, _ := http.NewRequest("POST", "http://stockade"+path, bytes.NewReader(bb))
		req.Header.Set("Content-Type", "application/json")
		return doJSON(c, req)
	}
	st, m := post("/v1/sessions", map[string]any{})
	id, _ := m["session_id"].(string)
	if st != 201 && st != 200 || id == "" {
		b.Fatalf("a session on %s: %d %v", sock, st, m)
	}
	return func() time.Duration {
		t0 := time.Now()
		st, m := post("/v1/sessions/"+id+"/exec", map[string]any{"code": "pass"})
		d := time.Since(t0)
		if st != 200 {
			b.Fatalf("exec on the unix socket: %d %v", st, m)
		}
		return d
	}
}
