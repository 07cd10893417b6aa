package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/certtest"
	"github.com/stockade/stockade/internal/netnstest"
	"github.com/stockade/stockade/internal/proctest"
	"github.com/stockade/stockade/internal/testenv"
	"github.com/stockade/stockade/jail"
)

// These tests run a real cluster: hosts are network namespaces made here
// (a veth each to a bridge in a namespace of the test's own), each with
// one nats-server (STOCKADE_NATS_SERVER, which make test sets; the three
// form a JetStream cluster over mutual-TLS routes) and one real
// `stockade serve --cluster` (STOCKADE_BIN). The gateway's side is a
// Backend in the test process, dialling into the bridge's namespace.

// testGrace: half of it (a node's fence) outlasts a NATS leader election
// (4 to 9 s in nats-server), so that a host lost breaks nothing else.
const testGrace = 20 * time.Second

type host struct {
	name, ns, ip string
	dir          string
	nats         *proctest.Proc
	serve        *proctest.Proc
	serveLog     *proctest.Buffer
	// cgroup, when set, is a cgroup directory (v1 cpu) the host's serve
	// joins before it starts (make bench's CPU quota per host); env is
	// added to its environment.
	cgroup string
	env    []string
}

type fixture struct {
	t       testing.TB
	tag     string
	hub     string
	dir     string
	hosts   []*host
	ca      string
	g       *Backend
	gcfg    Config
	bin     string
	natsBin string
	// nats is each nats-server's max_payload and max_file_store.
	nats natsLimits
	// nodeEdit, when set, changes the nodes' files.
	nodeEdit func(*Config)
}

// natsLimits are a test's nats-servers' limits.
type natsLimits struct{ payload, store string }

// testResultsMaxBytes is the results bucket's bound in the tests' files:
// well inside the servers' store.
const testResultsMaxBytes = 64 << 20

func needCluster(t testing.TB) (bin, natsBin string) {
	t.Helper()
	testenv.NeedRoot(t, "makes network namespaces and starts real jails")
	bin = testenv.NeedBinary(t, "the hosts run a real stockade serve --cluster")
	natsBin = os.Getenv("STOCKADE_NATS_SERVER")
	if natsBin == "" {
		t.Skip("set STOCKADE_NATS_SERVER to a nats-server (make test installs one into build/nats)")
	}
	if _, err := os.Stat(natsBin); err != nil {
		t.Fatalf("STOCKADE_NATS_SERVER: %v", err)
	}
	return bin, natsBin
}

func sh(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// newFixture makes n hosts, their NATS cluster and the gateway's
// backend; the nodes are started by startNode.
func newFixture(t testing.TB, n int) *fixture { return newFixtureWith(t, n, nil) }

// newFixtureWith is newFixture with the gateway's file changed by edit.
func newFixtureWith(t testing.TB, n int, edit func(*Config)) *fixture {
	return newFixtureLimits(t, n, natsLimits{payload: "16MB", store: "1GB"}, edit)
}

// newFixtureLimits is newFixtureWith on nats-servers of the limits given.
func newFixtureLimits(t testing.TB, n int, limits natsLimits, edit func(*Config)) *fixture {
	bin, natsBin := needCluster(t)
	tagb := make([]byte, 3)
	rand.Read(tagb)
	tag := hex.EncodeToString(tagb)
	f := &fixture{t: t, tag: tag, hub: "sch" + tag, dir: t.TempDir(), bin: bin, natsBin: natsBin, nats: limits}
	os.Chmod(f.dir, 0o755)
	t.Cleanup(f.cleanup)
	sh(t, "ip", "netns", "add", f.hub)
	sh(t, "ip", "-n", f.hub, "link", "set", "lo", "up")
	sh(t, "ip", "-n", f.hub, "link", "add", "br0", "type", "bridge")
	sh(t, "ip", "-n", f.hub, "addr", "add", "10.77.0.1/24", "dev", "br0")
	sh(t, "ip", "-n", f.hub, "link", "set", "br0", "up")
	var ips []string
	for i := range n {
		h := &host{name: fmt.Sprintf("h%d", i+1), ns: fmt.Sprintf("sc%s%d", tag, i+1), ip: fmt.Sprintf("10.77.0.%d", 11+i)}
		h.dir = filepath.Join(f.dir, h.name)
		os.MkdirAll(h.dir, 0o755)
		sh(t, "ip", "netns", "add", h.ns)
		sh(t, "ip", "-n", h.ns, "link", "set", "lo", "up")
		sh(t, "ip", "-n", h.ns, "link", "add", "eth0", "type", "veth", "peer", "name", "vb"+h.name, "netns", f.hub)
		sh(t, "ip", "-n", f.hub, "link", "set", "vb"+h.name, "master", "br0", "up")
		sh(t, "ip", "-n", h.ns, "addr", "add", h.ip+"/24", "dev", "eth0")
		sh(t, "ip", "-n", h.ns, "link", "set", "eth0", "up")
		f.hosts = append(f.hosts, h)
		ips = append(ips, h.ip)
	}
	f.certs(ips)
	for _, h := range f.hosts {
		f.startNATS(h)
	}
	dialer = nsDialer{ns: "/run/netns/" + f.hub}
	f.gcfg = f.config("gateway", "")
	if edit != nil {
		edit(&f.gcfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), proctest.Budget(t, 60*time.Second))
	defer cancel()
	var err error
	for {
		// Until the JetStream cluster has elected its leader, a request
		// goes unanswered: short tries.
		try, stop := context.WithTimeout(ctx, 3*time.Second)
		f.g, err = NewBackend(try, f.gcfg)
		stop()
		if err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("gateway backend: %v", err)
	}
	return f
}

func (f *fixture) cleanup() {
	if f.g != nil {
		f.g.Close()
	}
	for _, h := range f.hosts {
		for _, p := range []*proctest.Proc{h.serve, h.nats} {
			if p != nil {
				p.Kill()
			}
		}
	}
	for _, h := range f.hosts {
		exec.Command("ip", "netns", "del", h.ns).Run()
	}
	exec.Command("ip", "netns", "del", f.hub).Run()
	if f.t.Failed() {
		for _, h := range f.hosts {
			if h.serveLog != nil {
				f.t.Logf("%s's serve log:\n%s", h.name, tailOf(h.serveLog.String(), 6000))
			}
			if h.nats != nil {
				f.t.Logf("%s's nats-server log:\n%s", h.name, tailOf(h.nats.Stderr(), 3000))
			}
		}
	}
}

func tailOf(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// nsDialer dials from inside a network namespace: the socket is made on
// a thread that entered it, and then works from any thread.
type nsDialer struct{ ns string }

func (d nsDialer) Dial(network, addr string) (net.Conn, error) {
	var c net.Conn
	err := netnstest.In(d.ns, func() (err error) {
		c, err = net.DialTimeout(network, addr, 3*time.Second)
		return err
	})
	if err != nil && c != nil { // dialled, but the thread could not return
		c.Close()
		return nil, err
	}
	return c, err
}

// certs makes a CA, the servers' certificate (for clients and routes:
// server and client auth, every host's address) and writes them.
func (f *fixture) certs(ips []string) {
	ca := certtest.NewCA(f.t, "stockade test CA "+f.tag)
	tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: "nats"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	leaf := ca.Issue(f.t, tmpl)
	f.ca = certtest.WriteFile(f.t, f.dir, "ca.pem", ca.PEM, 0o600)
	certtest.WriteFile(f.t, f.dir, "server.pem", leaf.CertPEM, 0o600)
	certtest.WriteFile(f.t, f.dir, "server-key.pem", leaf.KeyPEM, 0o600)
}

// password of a role in the test's NATS users.
func (f *fixture) password(role string) string { return "pw-" + role + "-" + f.tag }

// natsConf is one server's configuration: TLS on the client port, mutual
// TLS on the routes, JetStream, and one user per role, scoped.
func (f *fixture) natsConf(h *host) string {
	var routes []string
	for _, o := range f.hosts {
		if o != h {
			routes = append(routes, fmt.Sprintf("tls://%s:6222", o.ip))
		}
	}
	tlsBlock := fmt.Sprintf(`{ cert_file: %q, key_file: %q, ca_file: %q, timeout: 5 }`,
		filepath.Join(f.dir, "server.pem"), filepath.Join(f.dir, "server-key.pem"), f.ca)
	routeTLS := strings.Replace(tlsBlock, "timeout: 5", "timeout: 5, verify: true", 1)
	var users []string
	users = append(users, fmt.Sprintf(`{ user: gateway, password: %q, permissions: {
      publish: { allow: ["stockade.work", "stockade.node.*.api", "$JS.API.>", "$KV.>"] },
      subscribe: { allow: ["_INBOX_gateway.>", "stockade.run.>"] } } }`, f.password("gateway")))
	for _, o := range f.hosts {
		users = append(users, fmt.Sprintf(`{ user: %s, password: %q, permissions: nodePerms(%s) }`, o.name, f.password(o.name), o.name))
	}
	// nats-server has no functions: each node's block is spelled out.
	conf := fmt.Sprintf(`server_name: %s
listen: "%s:4222"
tls: %s
max_payload: %s
ping_interval: "2s"
ping_max: 2
no_auth_user: ""
jetstream { store_dir: %q, max_memory_store: 64MB, max_file_store: %s }
cluster { name: stockade-test, listen: "%s:6222", routes: [%s], tls: %s }
authorization { users: [
%s
] }
`, h.name, h.ip, tlsBlock, f.nats.payload, filepath.Join(h.dir, "js"), f.nats.store, h.ip, strings.Join(quoteAll(routes), ", "), routeTLS, strings.Join(users, ",\n"))
	for _, o := range f.hosts {
		conf = strings.Replace(conf, "nodePerms("+o.name+")", nodePermissions(o.name), 1)
	}
	if len(f.hosts) == 1 {
		// One server is no JetStream cluster.
		conf = regexp.MustCompile(`(?m)^cluster \{.*\n`).ReplaceAllString(conf, "")
	}
	conf = strings.Replace(conf, "no_auth_user: \"\"\n", "", 1)
	return conf
}

// nodePermissions is what a node's identity may do (docs/cluster.md has
// the same block).
func nodePermissions(node string) string {
	return fmt.Sprintf(`{
      publish: { allow: ["$JS.API.INFO", "$JS.API.STREAM.INFO.*", "$JS.API.CONSUMER.INFO.STOCKADE_WORK.nodes",
        "$JS.API.CONSUMER.MSG.NEXT.STOCKADE_WORK.nodes", "$JS.ACK.STOCKADE_WORK.nodes.>",
        "$JS.API.DIRECT.GET.KV_stockade_claims.>", "$JS.API.STREAM.MSG.GET.KV_stockade_claims",
        "$KV.stockade_claims.>", "$KV.stockade_results.>", "$KV.stockade_nodes.%[1]s", "$KV.stockade_nodes.%[1]s.ended.*",
        "stockade.run.%[1]s.>"] },
      subscribe: { allow: ["_INBOX_%[1]s.>", "stockade.node.%[1]s.api"] },
      allow_responses: true }`, node)
}

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = fmt.Sprintf("%q", x)
	}
	return out
}

func (f *fixture) startNATS(h *host) {
	conf := filepath.Join(h.dir, "nats.conf")
	if err := os.WriteFile(conf, []byte(f.natsConf(h)), 0o600); err != nil {
		f.t.Fatal(err)
	}
	cmd := exec.Command("nsenter", "--net=/run/netns/"+h.ns, f.natsBin, "-c", conf)
	p, err := proctest.Start(cmd)
	if err != nil {
		f.t.Fatal(err)
	}
	h.nats = p
	deadline := time.Now().Add(proctest.Budget(f.t, 20*time.Second))
	for {
		c, err := (nsDialer{ns: "/run/netns/" + h.ns}).Dial("tcp", h.ip+":4222")
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("nats-server on %s: not listening: %v\n%s", h.name, err, p.Stderr())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// config is a role's cluster file contents.
func (f *fixture) config(role, node string) Config {
	var urls []string
	for _, h := range f.hosts {
		urls = append(urls, "tls://"+h.ip+":4222")
	}
	c := Config{URLs: urls, CA: f.ca, User: role, Password: f.password(role), Node: node,
		Grace: Duration(testGrace), QueueWait: Duration(60 * time.Second), Replicas: min(3, len(f.hosts)),
		RequestTimeout: Duration(60 * time.Second), ResultsMaxBytes: testResultsMaxBytes}
	return c
}

// startNode starts `stockade serve --cluster` on h and waits for its
// first heartbeat.
func (f *fixture) startNode(h *host, args ...string) {
	t := f.t
	c := f.config(h.name, h.name)
	c.URLs = append([]string{"tls://" + h.ip + ":4222"}, c.URLs...)
	if f.nodeEdit != nil {
		f.nodeEdit(&c)
	}
	b, _ := json.Marshal(c)
	file := filepath.Join(h.dir, "cluster.json")
	os.WriteFile(file, b, 0o600)
	h.serveLog = &proctest.Buffer{}
	argv := append([]string{"nsenter", "--net=/run/netns/" + h.ns, f.bin, "serve", "--socket", filepath.Join(h.dir, "s.sock"),
		"--cluster", file, "--audit-log", filepath.Join(h.dir, "audit.log"), "--audit-required",
		"--concurrency", "2", "--pool", "1", "--grace", "5s"}, args...)
	if h.cgroup != "" {
		argv = append([]string{"sh", "-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, h.cgroup}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	if h.env != nil {
		cmd.Env = append(os.Environ(), h.env...)
	}
	cmd.Stdout, cmd.Stderr = h.serveLog, h.serveLog
	p, err := proctest.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	h.serve = p
	deadline := time.Now().Add(proctest.Budget(t, 60*time.Second))
	for !strings.Contains(h.serveLog.String(), "taking work") || f.heartbeat(h.name).State != StateUp {
		select {
		case <-p.Done():
			t.Fatalf("%s's serve ended: %s", h.name, h.serveLog.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's serve: no heartbeat: %s", h.name, h.serveLog.String())
		}
	}
}

func (f *fixture) heartbeat(node string) heartbeat {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var hb heartbeat
	if e, err := f.g.b.nodes.Get(ctx, node); err == nil {
		json.Unmarshal(e.Value(), &hb)
		if time.Since(e.Created()) > f.gcfg.Grace.D() {
			hb.State = "lost"
		}
	}
	return hb
}

// do is one request through the backend, as a gateway would make it.
func (f *fixture) do(ctx context.Context, tenant, key, method, path string, body any) (int, http.Header, map[string]any) {
	var rd *bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	r := httptest.NewRequest(method, path, rd).WithContext(ctx)
	w := httptest.NewRecorder()
	f.g.Serve(w, r, tenant, key)
	var m map[string]any
	json.Unmarshal(w.Body.Bytes(), &m)
	return w.Code, w.Header(), m
}

// auditStarts is the union of the hosts' audit logs: cluster run id ->
// the hosts whose audit has a start line for it.
func (f *fixture) auditStarts() map[string][]string {
	out := map[string][]string{}
	for _, h := range f.hosts {
		b, _ := os.ReadFile(filepath.Join(h.dir, "audit.log"))
		for _, line := range strings.Split(string(b), "\n") {
			var e struct {
				Event string `json:"event"`
				ID    string `json:"cluster_run_id"`
			}
			if json.Unmarshal([]byte(line), &e) == nil && e.Event == "start" && e.ID != "" {
				out[e.ID] = append(out[e.ID], h.name)
			}
		}
	}
	return out
}

// leftEntries lists the run directories and stockade cgroups (of the
// test's own cgroup, where the nodes run) whose names carry pid: what a
// process of that pid left behind.
func leftEntries(pid int) []string {
	mark := "-" + strconv.Itoa(pid) + "-"
	var left []string
	ents, _ := os.ReadDir(jail.RunBase())
	for _, e := range ents {
		if strings.Contains(e.Name(), mark) {
			left = append(left, "run dir "+e.Name())
		}
	}
	b, _ := os.ReadFile("/proc/self/cgroup")
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || strings.HasPrefix(parts[1], "name=") {
			continue
		}
		mnt := "/sys/fs/cgroup"
		if parts[1] != "" {
			mnt += "/" + strings.Split(parts[1], ",")[0]
		}
		dir := filepath.Join(mnt, parts[2])
		filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() && strings.Contains(d.Name(), mark) {
				left = append(left, "cgroup "+p)
			}
			return nil
		})
	}
	return left
}

// otherCA is a CA certificate (PEM) that signed nothing of the fixture's.
func otherCA(t *testing.T) []byte { return certtest.NewCA(t, "another CA").PEM }
