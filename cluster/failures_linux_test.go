package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/stockade/stockade/internal/proctest"
)

// claimer is the node that claimed run id, or "".
func (f *fixture) claimer(id string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st := f.g.look(ctx, "tenant-a", id)
	if st.claim != nil {
		return st.claim.Node
	}
	if st.result != nil {
		return st.result.Node
	}
	return ""
}

// kill9 SIGKILLs h's stockade serve alone (nsenter exec'd it: same pid).
func (f *fixture) kill9(h *host) {
	syscall.Kill(h.serve.Cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-h.serve.Done():
	case <-time.After(proctest.Budget(f.t, 30*time.Second)):
		f.t.Fatalf("%s's serve outlived SIGKILL", h.name)
	}
}

// Done-when 2: kill -9 of a host with runs in flight: those runs answer
// host_lost (and say so again at GET /v1/runs/{id}); the queued runs
// finish elsewhere; no run starts twice; the host's next start takes work
// again.
func TestClusterHostKilledRunsAnswerHostLost(t *testing.T) {
	f := newFixture(t, 3)
	for _, h := range f.hosts {
		f.startNode(h)
	}
	ctx, cancel := context.WithTimeout(context.Background(), proctest.Budget(t, 3*time.Minute))
	defer cancel()
	// Six long runs fill the six slots; six short ones wait in the queue.
	var keys []string
	for i := range 12 {
		keys = append(keys, fmt.Sprintf("r%d", i))
	}
	answers := make([]runAnswer, len(keys))
	answered := make([]time.Time, len(keys))
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code := "import time; time.sleep(8); print('long')"
			if i >= 6 {
				code = "print('short')"
			}
			st, h, m := f.do(ctx, "tenant-a", k, "POST", "/v1/run", map[string]any{"code": code})
			answers[i], answered[i] = runAnswer{st, h.Get(RunIDHeader), m}, time.Now()
		}()
		if i == 5 {
			time.Sleep(500 * time.Millisecond) // the long ones first
		}
	}
	victim := f.hosts[1]
	// Kill the victim once it holds runs.
	deadline := time.Now().Add(proctest.Budget(t, 60*time.Second))
	for {
		n := 0
		for _, k := range keys[:6] {
			if f.claimer(RunID("tenant-a", k)) == victim.name {
				n++
			}
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the victim host took no run")
		}
		time.Sleep(50 * time.Millisecond)
	}
	claimedBy := map[string]string{}
	for _, k := range keys {
		claimedBy[k] = f.claimer(RunID("tenant-a", k))
	}
	killed := victim.serve.Cmd.Process.Pid
	if held := leftEntries(killed); len(held) == 0 {
		t.Fatal("the victim holds no run directory or cgroup before the kill: the check after it would prove nothing")
	}
	f.kill9(victim)
	killedAt := time.Now()
	// The killed host leaves no run directory and no cgroup (a cgroup
	// still holding a jail's process could not go).
	deadline = time.Now().Add(proctest.Budget(t, 30*time.Second))
	for left := leftEntries(killed); len(left) > 0; left = leftEntries(killed) {
		if time.Now().After(deadline) {
			t.Errorf("the killed host left: %v", left)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	wg.Wait()
	lost := 0
	for i, a := range answers {
		k := keys[i]
		switch {
		case a.body["verdict"] == "host_lost":
			lost++
			// The time is make bench's to hold to grace + 1 s; here it is said.
			t.Logf("run %s: host_lost %v after the kill (grace %v)", k, answered[i].Sub(killedAt).Round(time.Millisecond), testGrace)
			if a.body["node"] != victim.name || claimedBy[k] != victim.name {
				t.Errorf("run %s answered host_lost of %v, claimed by %q before the kill", k, a.body["node"], claimedBy[k])
			}
			// Asked again, it says the same.
			if st, _, m := f.do(ctx, "tenant-a", "", "GET", "/v1/runs/"+a.id, nil); st != 200 || m["verdict"] != "host_lost" {
				t.Errorf("GET of lost run %s: %d %v", k, st, m)
			}
		case a.status == 200 && a.body["verdict"] == "ok":
			if a.body["node"] == victim.name {
				t.Errorf("run %s answered ok from the killed host", k)
			}
		default:
			t.Errorf("run %s: %d %v", k, a.status, a.body)
		}
	}
	if lost == 0 {
		t.Error("no run answered host_lost")
	}
	// The gateway's metrics count them (asked again at GET is not another).
	if want, m := fmt.Sprintf("stockade_cluster_runs_host_lost_total %d\n", lost), f.metrics(); !strings.Contains(m, want) {
		t.Errorf("metrics lack %q:\n%s", want, m)
	}
	// An answered run started exactly once; a lost one at most once (its
	// host may have died between the claim and the start), on its host.
	starts := f.auditStarts()
	for i, a := range answers {
		hosts := starts[a.id]
		switch {
		case a.body["verdict"] == "ok" && len(hosts) != 1:
			t.Errorf("run %s (ok) started on %v", keys[i], hosts)
		case a.body["verdict"] == "host_lost" && (len(hosts) > 1 || len(hosts) == 1 && hosts[0] != victim.name):
			t.Errorf("run %s (host_lost) started on %v", keys[i], hosts)
		}
	}
	// The host comes back: a new incarnation takes work again, and its
	// old runs stay lost.
	f.startNode(victim)
	var more []string
	for i := range 6 {
		more = append(more, fmt.Sprintf("after%d", i))
	}
	got := f.submitAll(ctx, "tenant-a", more, func(string) string { return "import time; time.sleep(1); print('x')" })
	for i, a := range got {
		if a.body["verdict"] != "ok" {
			t.Errorf("run %s after the restart: %d %v", more[i], a.status, a.body)
		}
	}
	for i, a := range answers {
		if a.body["verdict"] == "host_lost" {
			if _, _, m := f.do(ctx, "tenant-a", "", "GET", "/v1/runs/"+a.id, nil); m["verdict"] != "host_lost" {
				t.Errorf("lost run %s after its host came back: %v", keys[i], m)
			}
		}
	}
}

// newSession makes a session through the backend and returns its id and
// the node holding it.
func (f *fixture) newSession(ctx context.Context, tenant string) (string, string) {
	f.t.Helper()
	st, _, m := f.do(ctx, tenant, "", "POST", "/v1/sessions", map[string]any{})
	if st != 201 && st != 200 {
		f.t.Fatalf("create session: %d %v", st, m)
	}
	id, _ := m["session_id"].(string)
	e, err := f.g.b.sessions.Get(ctx, id)
	if err != nil {
		f.t.Fatalf("session %s not recorded: %v", id, err)
	}
	var rec sessionRec
	jsonUnmarshal(e.Value(), &rec)
	return id, rec.Node
}

func (f *fixture) hostNamed(name string) *host {
	for _, h := range f.hosts {
		if h.name == name {
			return h
		}
	}
	f.t.Fatalf("no host %s", name)
	return nil
}

// Done-when 3 (and a part of 7): kill -9 of the host holding a session:
// the next exec answers 410 lost at once (no responders, not a timeout),
// or within the grace when the kill's news had not yet crossed the NATS
// route (the node's heartbeat then says it); another tenant gets 404 for
// the session.
func TestClusterSessionOnKilledHostAnswersLost(t *testing.T) {
	f := newFixture(t, 2)
	for _, h := range f.hosts {
		f.startNode(h)
	}
	ctx, cancel := context.WithTimeout(context.Background(), proctest.Budget(t, 2*time.Minute))
	defer cancel()
	id, node := f.newSession(ctx, "tenant-a")
	exec := func(tenant, code string) (int, map[string]any) {
		st, _, m := f.do(ctx, tenant, "", "POST", "/v1/sessions/"+id+"/exec", map[string]any{"code": code})
		return st, m
	}
	if st, m := exec("tenant-a", "x = 41\nprint(x + 1)"); st != 200 || !strings.Contains(fmt.Sprint(m["stdout"]), "42") {
		t.Fatalf("exec: %d %v", st, m)
	}
	// Listed for its tenant (from every host at once), for no other.
	for tenant, want := range map[string]int{"tenant-a": 1, "tenant-b": 0} {
		st, _, m := f.do(ctx, tenant, "", "GET", "/v1/sessions", nil)
		list, _ := m["sessions"].([]any)
		if st != 200 || len(list) != want {
			t.Errorf("%s's sessions: %d %v, want %d", tenant, st, m, want)
		}
		if want == 1 && (len(list) != 1 || list[0].(map[string]any)["session_id"] != id) {
			t.Errorf("%s's sessions: %v, want %s", tenant, list, id)
		}
	}
	// Refused by the gateway, before the request reaches the node (whose
	// server, owner check and all, would refuse it again: its own 404
	// says "no session ...").
	if st, m := exec("tenant-b", "print(x)"); st != 404 || m["error"] != "no such session" {
		t.Errorf("tenant-b's exec in tenant-a's session: %d %v, want the gateway's 404", st, m)
	}
	f.kill9(f.hostNamed(node))
	began := time.Now()
	st, m := exec("tenant-a", "print(x)")
	took := time.Since(began)
	if st != 410 || m["state"] != "lost" {
		t.Fatalf("exec after its host was killed: %d %v, want 410 lost", st, m)
	}
	t.Logf("410 lost in %v", took)
	// Its host back: still lost, not the new process's 404.
	f.startNode(f.hostNamed(node))
	if st, m := exec("tenant-a", "print(x)"); st != 410 || m["state"] != "lost" {
		t.Errorf("exec after its host came back: %d %v, want 410 lost", st, m)
	}
	// A host that hangs (stopped, its NATS connection open, so the
	// request is delivered and nobody answers): its heartbeat lapses, and
	// the exec answers 410 lost within the grace, not 503 at the
	// request's timeout (60 s here).
	id, node = f.newSession(ctx, "tenant-a")
	hung := f.hostNamed(node).serve.Cmd.Process.Pid
	syscall.Kill(hung, syscall.SIGSTOP)
	defer syscall.Kill(hung, syscall.SIGCONT)
	if st, m := exec("tenant-a", "print(1)"); st != 410 || m["state"] != "lost" {
		t.Errorf("exec on a hung host: %d %v, want 410 lost", st, m)
	}
}

func jsonUnmarshal(b []byte, v any) { _ = json.Unmarshal(b, v) }

// Done-when 7, NATS and listeners: a node's identity cannot publish work,
// cannot read another node's subject, cannot make streams, publishes a
// run's lines only under its own name and reads none; a wrong
// password and a plain-TCP client are refused; stockade serve --cluster
// listens on no TCP port.
func TestAttackNodeIdentityPublishesWork(t *testing.T) {
	f := newFixture(t, 2)
	for _, h := range f.hosts {
		f.startNode(h)
	}
	h1 := f.hosts[0]
	errs := make(chan error, 16)
	c := f.config(h1.name, h1.name)
	nc, err := connect(c, "attacker", h1.name, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	wantViolation := func(what string) {
		t.Helper()
		select {
		case err := <-errs:
			if !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
				t.Errorf("%s: %v, want a permissions violation", what, err)
			}
		case <-time.After(proctest.Budget(t, 10*time.Second)):
			t.Errorf("%s: allowed (no permissions violation)", what)
		}
	}
	if err := nc.Publish(WorkSubject, []byte(`{"run_id":"forged","tenant":"tenant-a","request":{"code":"print(1)"}}`)); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	wantViolation("a node publishing work")
	if _, err := nc.SubscribeSync(NodeSubject(f.hosts[1].name)); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	wantViolation("a node reading another node's subject")
	if _, err := nc.SubscribeSync("_INBOX_gateway.>"); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	wantViolation("a node reading the gateway's replies")
	if err := nc.Publish("$KV.stockade_nodes."+f.hosts[1].name, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	wantViolation("a node writing another node's heartbeat")
	// A run's lines: a node publishes under its own name only, and reads
	// no run's lines.
	if err := nc.Publish(RunSubject(f.hosts[1].name, "r1"), []byte(`{"type":"stdout","data":"forged"}`+"\n")); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	wantViolation("a node publishing another node's run lines")
	if _, err := nc.SubscribeSync("stockade.run.>"); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	wantViolation("a node reading runs' lines")
	// Its own run subject it may publish to (what a streamed run needs).
	if err := nc.Publish(RunSubject(h1.name, "r1"), nil); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	select {
	case err := <-errs:
		t.Errorf("a node publishing on its own run subject: %v", err)
	case <-time.After(time.Second):
	}
	// Nothing forged reached the queue.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := f.g.js.Stream(ctx, StreamName)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := s.Info(ctx); err != nil || info.State.Msgs != 0 || info.State.LastSeq != 0 {
		t.Errorf("the work stream after the forgery: %+v %v", info.State, err)
	}
	// A wrong password, and a client without TLS, are refused.
	bad := c
	bad.Password = "wrong"
	if nc, err := connect(bad, "wrong", h1.name); err == nil {
		nc.Close()
		t.Error("a wrong password was accepted")
	}
	// A client that trusts another CA does not take the servers for
	// what they say they are.
	other := c
	other.CA = filepath.Join(t.TempDir(), "other-ca.pem")
	if err := os.WriteFile(other.CA, otherCA(t), 0o600); err != nil {
		t.Fatal(err)
	}
	if nc, err := connect(other, "other-ca", h1.name); err == nil {
		nc.Close()
		t.Error("a server certificate of another CA was accepted")
	}
	plain, err := nats.Connect("nats://"+h1.ip+":4222", nats.UserInfo(c.User, c.Password), nats.SetCustomDialer(dialer), nats.Timeout(3*time.Second))
	if err == nil {
		plain.Close()
		t.Error("a client without TLS was accepted")
	}
	// The node listens on no TCP port of its host.
	out, err := exec.Command("nsenter", "--net=/run/netns/"+h1.ns, "ss", "-Hltnp").CombinedOutput()
	if err != nil {
		t.Fatalf("ss: %v: %s", err, out)
	}
	if regexp.MustCompile(`"stockade"`).Match(out) {
		t.Errorf("stockade serve --cluster listens on TCP:\n%s", out)
	}
	if !strings.Contains(string(out), "nats-server") {
		t.Errorf("ss shows no listener at all (the check would prove nothing):\n%s", out)
	}
	if errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}
