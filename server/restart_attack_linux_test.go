package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// A restart (POST .../restart) takes the fresh driver's hello as the word
// of a new interpreter the server's bootstrap started: these attacks make
// a program of the cell's answer it instead, and the checks that stop
// them (session_lifecycle_linux.go, restart) are the driver checks of
// every answer (driverIntact) applied before and after the restart.

// restartFake is a program that answers the driver's protocol on fd 3 in
// its place, silent until asked: a restart's hello with the new token it
// reads in the request, as the fresh driver would, and "ok" with made-up
// results for any exec.
const restartFake = `import json, os, socket, sys
s = socket.socket(fileno=3)
def send(o):
    b = json.dumps(o).encode()
    s.sendall(b"%d\n" % len(b) + b)
buf = b""
while True:
    data, anc, _, _ = s.recvmsg(1 << 16, socket.CMSG_SPACE(64))
    if not data:
        os._exit(0)
    for level, kind, payload in anc:
        for i in range(0, len(payload) - len(payload) % 4, 4):
            os.close(int.from_bytes(payload[i:i + 4], sys.byteorder))
    buf += data
    while b"\n" in buf:
        head, _, rest = buf.partition(b"\n")
        if len(rest) < int(head):
            break
        req, buf = json.loads(rest[:int(head)]), rest[int(head):]
        if req.get("op") == "restart":
            send({"hello": req["hello"], "python": "fake"})
            continue
        send({"started": req["token"]})
        send({"token": req["token"], "status": "ok", "result": "'forged'", "result_truncated": False, "error": None, "images": [], "images_truncated": False})
`

// replaceDriverLater has a cell leave a thread that, once the test puts
// /work/swap, execs restartFake in the driver's process (same pid, the
// channel made inheritable): the exec that started it answered as the
// real driver, so the replacement happens between execs, where no answer
// is checked. It waits until the fake runs (its command line names mark).
func replaceDriverLater(t *testing.T, s *testServer, id string) {
	t.Helper()
	mark := "stockade-restart-fake-" + newID()
	cell := fmt.Sprintf("import os, sys, threading, time\nFAKE = %q\n"+
		"def swap():\n    while not os.path.exists('/work/swap'):\n        time.sleep(0.05)\n"+
		"    os.set_inheritable(3, True)\n    os.execv(sys.executable, [sys.executable, '-c', FAKE, %q])\n"+
		"threading.Thread(target=swap, daemon=True).start()\n'waiting'", restartFake, mark)
	if r := s.cell(id, cell); r.Verdict != ExecOK || !resultIs(r, "'waiting'") {
		t.Fatalf("the cell that leaves the swapping thread: %s %+v", resultText(r), r)
	}
	if code, body := s.call("PUT", "/v1/sessions/"+id+"/files/swap", []byte("now"), nil); code/100 != 2 {
		t.Fatalf("PUT /work/swap: %d %s", code, body)
	}
	eventually(t, "the fake runs in the driver's process", func() bool { return len(processesWith(mark)) > 0 })
}

// restartCall is POST .../restart, decoded.
func restartCall(t *testing.T, s *testServer, id string) (int, RestartResult, []byte) {
	t.Helper()
	code, body := s.call("POST", "/v1/sessions/"+id+"/restart", nil, nil)
	var rr RestartResult
	if code == 200 {
		if err := json.Unmarshal(body, &rr); err != nil {
			t.Fatalf("decode %s: %v", body, err)
		}
	}
	return code, rr, body
}

// A cell replaces the driver between execs with a program that answers
// the restart's hello itself: taken as the fresh interpreter, its layout
// (a new execve's) would become the session's, and every later answer
// the fake's. The restart first checks the driver is the one the server
// started.
func TestAttackRestartLaundersReplacedDriver(t *testing.T) {
	s := startServer(t, "--pool", "1")
	id := s.session(SessionRequest{}).SessionID
	replaceDriverLater(t, s, id)
	code, rr, body := restartCall(t, s, id)
	if code != 200 || rr.Restarted || rr.State != "lost" || rr.Python == "fake" || rr.Session.Alive || rr.Session.Ended != SessionFailed || !strings.Contains(rr.Why, "replaced") {
		t.Errorf("a restart of a replaced driver: %d %s, want restarted false, state lost, the session ended (error) for the replaced driver", code, body)
	}
	if code, body := s.call("POST", "/v1/sessions/"+id+"/exec", ExecRequest{Code: ptr("x")}, nil); code != 410 || bytes.Contains(body, []byte("forged")) {
		t.Errorf("an exec after the restart: %d %s, want 410", code, body)
	}
}

// A cell patches the driver in its own interpreter so that the restart
// op answers the hello (with the token of the request) without exec'ing:
// the variables, imports, patches and processes of the cells would stay,
// called fresh. The same pid answered, so only the layout can tell: a
// new execve draws a new one.
func TestAttackRestartAnsweredWithoutExec(t *testing.T) {
	s := startServer(t, "--pool", "1")
	id := s.session(SessionRequest{}).SessionID
	patch := "import sys\nf = sys._getframe()\n" +
		"while f is not None and not ('_restart' in f.f_globals and 'main' in f.f_globals):\n    f = f.f_back\n" +
		"g = f.f_globals\n" +
		"def answer_restart(req, chan, main=g['main']):\n    main({'hello': req['hello']})\n" +
		"g['_restart'] = answer_restart\n'patched'"
	if r := s.cell(id, patch); r.Verdict != ExecOK || !resultIs(r, "'patched'") {
		t.Fatalf("the patching cell: %s %+v", resultText(r), r)
	}
	s.cell(id, "import builtins\nbuiltins.kept = 'from before'")
	code, rr, body := restartCall(t, s, id)
	if code != 200 || rr.Restarted || rr.State != "lost" || rr.Session.Alive || rr.Session.Ended != SessionFailed || !strings.Contains(rr.Why, "without starting over") {
		t.Errorf("a restart answered without an execve: %d %s, want restarted false, state lost, the session ended (error)", code, body)
	}
	if code, body := s.call("POST", "/v1/sessions/"+id+"/exec", ExecRequest{Code: ptr("kept")}, nil); code != 410 || bytes.Contains(body, []byte("from before")) {
		t.Errorf("an exec after the restart: %d %s, want 410", code, body)
	}
}

// After a genuine restart the fresh driver's layout is the session's: its
// answers are taken, and a replacement of it is still caught.
func TestRestartedDriverIsCheckedAgain(t *testing.T) {
	s := startServer(t, "--pool", "1")
	id := s.session(SessionRequest{}).SessionID
	s.cell(id, "x = 1")
	if code, rr, body := restartCall(t, s, id); code != 200 || !rr.Restarted || rr.State != "fresh" || !rr.Session.Alive {
		t.Fatalf("restart: %d %s", code, body)
	}
	if r := s.cell(id, "6 * 7"); r.Verdict != ExecOK || !resultIs(r, "42") || !r.Session.Alive {
		t.Fatalf("an exec after the restart: %s %+v", resultText(r), r)
	}
	cell := cellFrames + fmt.Sprintf("FAKE = %q\nt = tok()\nos.set_inheritable(3, True)\nos.execv(sys.executable, [sys.executable, '-c', FAKE, t])\n", fakeDriver)
	r := s.exec(id, ExecRequest{Code: &cell, Timeout: "5s"})
	if r.Verdict != ExecFailed || r.State != "lost" || resultIs(r, "'forged'") || r.Session.Alive || !strings.Contains(r.Why, "replaced") {
		t.Errorf("the exec that replaced the restarted driver: %+v, want verdict error, state lost, why naming the replacement", r)
	}
}
