package server

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/internal/proctest"
	"github.com/stockade/stockade/internal/testenv"
	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/profiles"
)

// A run's answer does not wait for its jail's teardown, and shutdown does:
// with the teardown held (the server in this process, its hook blocked),
// the caller gets its whole answer, the audit log has the run's end with
// what it was held to, and Serve does not return until the teardown is let
// go; then nothing of the jail is left. A teardown done before the answer
// would hang the request here, one not waited for would let Serve return.
func TestServeAnswersBeforeTeardown(t *testing.T) {
	testenv.NeedJail(t)
	p, err := profiles.Builtin("python")
	if err != nil {
		t.Fatal(err)
	}
	var log, audit proctest.Buffer
	srv, err := New(Config{Profiles: []Profile{{Name: "python", Policy: p}}, Host: jail.DefaultHost(), Pool: 1,
		Log: &log, Audit: NewAuditWriter(&audit), Grace: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	held, release := make(chan struct{}, 1), make(chan struct{})
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	srv.beforeTeardown = func() {
		held <- struct{}{}
		<-release
	}
	before := entrySet()
	sock := socketDir(t) + "/s.sock"
	ln, err := Listen(sock, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()

	hc := unixClient(sock)
	hc.Timeout = time.Minute
	eventually(t, "the pool filled", func() bool { return srv.pools["python"].Snapshot().Ready == 1 })
	resp, err := hc.Post("http://stockade/v1/run", "application/json", strings.NewReader(`{"code": "print(1)"}`))
	if err != nil {
		t.Fatalf("no answer while the teardown is held: %v", err)
	}
	var out api.RunResponse
	err = json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || out.Result == nil || out.Verdict != jail.VerdictOK || out.Stdout != "1\n" || !out.Pool.Hit {
		t.Fatalf("answer %d %+v (%v)\n%s", resp.StatusCode, out.Result, err, log.String())
	}
	if out.Limits.MemoryBytes == nil || *out.Limits.MemoryBytes <= 0 || out.Cgroup == "none" || out.CPUMs <= 0 || out.PeakMemoryBytes == 0 {
		t.Errorf("the answer lacks what was enforced and counted: %+v", out.Result)
	}
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the run's teardown never began")
	}
	if !strings.Contains(audit.String(), `"event":"end"`) || !strings.Contains(audit.String(), `"verdict":"ok"`) ||
		!strings.Contains(audit.String(), `"memory_bytes":`) {
		t.Errorf("the audit log has not the run's end with its limits:\n%s", audit.String())
	}
	if left := leftovers(os.Getpid(), before); len(left) == 0 {
		t.Error("nothing of the answered run's jail is left while its teardown is held: the test holds nothing")
	}

	stop()
	select {
	case err := <-served:
		t.Fatalf("Serve returned (%v) with a run's teardown still held", err)
	case <-time.After(500 * time.Millisecond):
	}
	released = true
	close(release)
	select {
	case err := <-served:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Serve did not return after the teardown was let go")
	}
	if left := leftovers(os.Getpid(), before); len(left) > 0 {
		t.Errorf("left behind: %v\n%s", left, log.String())
	}
}
