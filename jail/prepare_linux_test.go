package jail

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/proctest"
	"github.com/stockade/stockade/internal/testenv"
)

// A prepared jail's clock starts with Start: a payload that waited in the
// pool for longer than its timeout still gets its whole timeout.
func TestPreparedClockStartsAtStart(t *testing.T) {
	testenv.NeedJail(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	s := py("import sys, time; code = sys.stdin.read(); time.sleep(0.3); print('got', code)")
	s.Timeout = time.Second
	p, err := Prepare(context.Background(), s, Streams{Stdin: r})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	r.Close()
	if p.Workdir() == "" {
		t.Fatal("no host path for the fresh /work")
	}
	if _, err := os.Stat(p.Workdir()); err != nil {
		t.Fatalf("work directory while prepared: %v", err)
	}
	time.Sleep(1500 * time.Millisecond) // longer than the timeout
	select {
	case <-p.Done():
		t.Fatal("the prepared jail ended while waiting")
	default:
	}
	var out strings.Builder
	go func() { w.WriteString("x"); w.Close() }()
	res, err := p.Start(context.Background(), StartOptions{Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != VerdictOK || res.Stdout != "got x\n" || out.String() != "got x\n" {
		t.Fatalf("got %+v, streamed %q", res, out.String())
	}
	if res.WallMs > 1000 {
		t.Errorf("wall %v ms counts the wait", res.WallMs)
	}
	if _, err := p.Start(context.Background(), StartOptions{}); err == nil {
		t.Error("a prepared jail started twice")
	}
	work := p.Workdir()
	p.Close()
	if _, err := os.Stat(work); !os.IsNotExist(err) {
		t.Errorf("work directory after Close: %v", err)
	}
	if left := ownLeftovers(t, os.Getpid()); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// Start may only shorten the timeout.
func TestPreparedStartShortensTimeout(t *testing.T) {
	testenv.NeedJail(t)
	s := py("while True: pass")
	s.Timeout = 20 * time.Second
	p, err := Prepare(context.Background(), s, Streams{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var res *Result
	if proctest.Within(t, jailDeadline(500*time.Millisecond), func(ctx context.Context) {
		res, err = p.Start(ctx, StartOptions{Timeout: 500 * time.Millisecond})
	}) {
		t.Fatalf("Start's timeout of 500ms did not end the spinning jail, the test's deadline did: %+v, %v", res, err)
	}
	if err != nil || res.Verdict != VerdictTimeout {
		t.Fatalf("got %+v, %v", res, err)
	}
}

// A prepared jail that dies while waiting says so through Done, and
// closing one that never started kills it and leaves nothing.
func TestPreparedDiesWhileWaiting(t *testing.T) {
	testenv.NeedJail(t)
	p, err := Prepare(context.Background(), py("import os; os._exit(3)"), Streams{})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed after the payload exited")
	}
	p.Close()
	q, err := Prepare(context.Background(), py("import time; time.sleep(60)"), Streams{})
	if err != nil {
		t.Fatal(err)
	}
	q.Close()
	select {
	case <-q.Done():
	default:
		t.Fatal("Close returned with the jail alive")
	}
	if left := ownLeftovers(t, os.Getpid()); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// A jail that cannot be set up fails Prepare with the reason and leaves
// nothing behind.
func TestPrepareFailsClosed(t *testing.T) {
	testenv.NeedJail(t)
	_, err := Prepare(context.Background(), spec("/no/such/program"), Streams{})
	if err == nil || !strings.Contains(err.Error(), "/no/such/program") {
		t.Fatalf("err %v", err)
	}
	if r := FailedResult(spec("x"), err); r.Verdict != VerdictError || r.ExitCode != ExitNotFound {
		t.Errorf("failed result %+v", r)
	}
	if left := ownLeftovers(t, os.Getpid()); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// TestPooledRunResultSaysEnforcedTimeout: a prepared jail started with a
// shorter timeout (a pooled jail serving a request that asked for less) is
// killed at that timeout, and its Result's limits must say so: the CLI's
// "timeout: killed after ..." and every JSON reader take it from there.
func TestPooledRunResultSaysEnforcedTimeout(t *testing.T) {
	testenv.NeedJail(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	s := py("import sys, time; sys.stdin.read(); time.sleep(30)")
	s.Timeout = 10 * time.Second
	p, err := Prepare(context.Background(), s, Streams{Stdin: r})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	r.Close()
	w.Close()
	var res *Result
	if proctest.Within(t, jailDeadline(time.Second), func(ctx context.Context) {
		res, err = p.Start(ctx, StartOptions{Timeout: time.Second})
	}) {
		t.Fatalf("Start's timeout of 1s did not end the sleeping jail, the test's deadline did: %+v, %v", res, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != VerdictTimeout || res.WallMs > 5000 {
		t.Fatalf("verdict %s after %.0f ms: not stopped at the 1s timeout", res.Verdict, res.WallMs)
	}
	if res.Limits.TimeoutMs != 1000 {
		t.Errorf("limits.timeout_ms %d: the run was stopped at 1000", res.Limits.TimeoutMs)
	}
}
