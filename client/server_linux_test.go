package client

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/internal/clitest"
)

// These tests talk to a real `stockade serve` (STOCKADE_BIN) through the
// client: every route, as the server answers it.

// realServer starts `stockade serve` on a socket of its own, waits for its
// pool and returns a client of it.
func realServer(t *testing.T) *Client {
	sock, log := clitest.Serve(t, "--audit-log", "", "--pool", "1")
	c, err := New(sock, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		h, err := c.Health(ctx(t))
		if err == nil && h.Pool["python"].Ready >= h.Pool["python"].Target {
			return c
		}
	}
	b, _ := os.ReadFile(log)
	t.Fatalf("the server was not ready in 30s:\n%s", b)
	return nil
}

func TestRealServerRunAndStream(t *testing.T) {
	c := realServer(t)
	code := "import sys\nprint('out')\nprint('err', file=sys.stderr)\nraise SystemExit(3)"
	res, err := c.Run(ctx(t), &api.RunRequest{Code: &code})
	if err != nil || res.Verdict != api.VerdictExit || res.ExitCode != 3 || res.Stdout != "out\n" || res.Stderr != "err\n" {
		t.Fatalf("%+v %v", res, err)
	}
	var out, errw bytes.Buffer
	res, err = c.RunStream(ctx(t), &api.RunRequest{Code: &code}, Output{Stdout: &out, Stderr: &errw})
	if err != nil || res.ExitCode != 3 || out.String() != "out\n" || errw.String() != "err\n" {
		t.Fatalf("%+v %v: streamed %q %q", res, err, out.String(), errw.String())
	}
	var e *Error
	if _, err := c.Run(ctx(t), &api.RunRequest{Code: &code, Limits: api.Limits{"no_such_limit": 1}}); !errors.As(err, &e) || e.Status != 400 || !strings.Contains(e.Body.Msg, "no_such_limit") {
		t.Fatalf("an unknown limit: %v", err)
	}
}

func TestRealServerSessionLifecycle(t *testing.T) {
	c := realServer(t)
	cx := ctx(t)
	s, err := c.CreateSession(cx, &api.SessionRequest{TTL: "10m", Files: map[string]string{"in.txt": "aGk="}})
	if err != nil {
		t.Fatal(err)
	}
	id := s.SessionID
	cell := func(code string) *api.ExecRequest { return &api.ExecRequest{Code: &code} }
	if r, err := c.Exec(cx, id, cell("x = open('in.txt').read()")); err != nil || r.Verdict != api.ExecOK {
		t.Fatalf("%+v %v", r, err)
	}
	var out bytes.Buffer
	r, err := c.ExecStream(cx, id, cell("print(x * 2)\nimport os\nos.makedirs('d', exist_ok=True)\nopen('d/o.txt', 'w').write(x)\nx"), Output{Stdout: &out})
	if err != nil || r.Verdict != api.ExecOK || out.String() != "hihi\n" || r.Result == nil || *r.Result != "'hi'" || r.Session.ID != id {
		t.Fatalf("%+v %v, streamed %q", r, err, out.String())
	}
	if r, err := c.Exec(cx, id, cell("1/0")); err != nil || r.Verdict != api.ExecException || r.Error == nil || r.Error.Name != "ZeroDivisionError" {
		t.Fatalf("%+v %v", r, err)
	}
	if _, err := c.WriteFile(cx, id, "d/up.bin", bytes.NewReader([]byte{0, 1, 2})); err != nil {
		t.Fatal(err)
	}
	l, err := c.ListFiles(cx, id, "d")
	if err != nil || len(l.Entries) != 2 {
		t.Fatalf("%+v %v", l, err)
	}
	if b, err := c.ReadFile(cx, id, "d/o.txt", 0); err != nil || string(b) != "hi" {
		t.Fatalf("%q %v", b, err)
	}
	if _, err := c.ReadFile(cx, id, "d/o.txt", 1); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a 2-byte file with max 1: %v", err)
	}
	if err := c.DeleteFile(cx, id, "d/up.bin"); err != nil {
		t.Fatal(err)
	}
	if info, err := c.SetTTL(cx, id, "5m"); err != nil || !info.Alive || info.ExecutionCount != 3 {
		t.Fatalf("%+v %v", info, err)
	}
	if rr, err := c.Restart(cx, id); err != nil || !rr.Restarted || rr.State != "fresh" {
		t.Fatalf("%+v %v", rr, err)
	}
	if r, err := c.Exec(cx, id, cell("x")); err != nil || r.Verdict != api.ExecException || r.Error.Name != "NameError" {
		t.Fatalf("after the restart x is gone: %+v %v", r, err)
	}
	var e *Error
	if err := c.Interrupt(cx, id); !errors.As(err, &e) || e.Status != 409 {
		t.Fatalf("interrupt with no exec: %v", err)
	}
	list, err := c.Sessions(cx)
	if err != nil || len(list) != 1 || list[0].SessionID != id {
		t.Fatalf("%+v %v", list, err)
	}
	end, err := c.EndSession(cx, id)
	if err != nil || end.Verdict != api.SessionClosed || end.ExecutionCount != 4 {
		t.Fatalf("%+v %v", end, err)
	}
	if _, err := c.Session(cx, id); !errors.As(err, &e) || e.Status != 410 {
		t.Fatalf("an ended session: %v", err)
	}
}
