package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/api"
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
	if r := s.cell(id, cell); r.Verdict != api.ExecOK || !resultIs(r, "'waiting'") {
		t.Fatalf("the cell that leaves the swapping thread: %s %+v", resultText(r), r)
	}
	if code, body := s.call("PUT", "/v1/sessions/"+id+"/files/swap", []byte("now"), nil); code/100 != 2 {
		t.Fatalf("PUT /work/swap: %d %s", code, body)
	}
	eventually(t, "the fake runs in the driver's process", func() bool { return len(processesWith(mark)) > 0 })
}

// restartCall is POST .../restart, decoded.
func restartCall(t *testing.T, s *testServer, id string) (int, api.RestartResult, []byte) {
	t.Helper()
	code, body := s.call("POST", "/v1/sessions/"+id+"/restart", nil, nil)
	var rr api.RestartResult
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
	id := s.session(api.SessionRequest{}).SessionID
	replaceDriverLater(t, s, id)
	code, rr, body := restartCall(t, s, id)
	if code != 200 || rr.Restarted || rr.State != "lost" || rr.Python == "fake" || rr.Session.Alive || rr.Session.Ended != api.SessionFailed || !strings.Contains(rr.Why, "replaced") {
		t.Errorf("a restart of a replaced driver: %d %s, want restarted false, state lost, the session ended (error) for the replaced driver", code, body)
	}
	if code, body := s.call("POST", "/v1/sessions/"+id+"/exec", api.ExecRequest{Code: ptr("x")}, nil); code != 410 || bytes.Contains(body, []byte("forged")) {
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
	id := s.session(api.SessionRequest{}).SessionID
	patch := "import sys\nf = sys._getframe()\n" +
		"while f is not None and not ('_restart' in f.f_globals and 'main' in f.f_globals):\n    f = f.f_back\n" +
		"g = f.f_globals\n" +
		"def answer_restart(req, chan, main=g['main']):\n    main({'hello': req['hello']}, chan)\n" +
		"g['_restart'] = answer_restart\n'patched'"
	if r := s.cell(id, patch); r.Verdict != api.ExecOK || !resultIs(r, "'patched'") {
		t.Fatalf("the patching cell: %s %+v", resultText(r), r)
	}
	s.cell(id, "import builtins\nbuiltins.kept = 'from before'")
	code, rr, body := restartCall(t, s, id)
	if code != 200 || rr.Restarted || rr.State != "lost" || rr.Session.Alive || rr.Session.Ended != api.SessionFailed || !strings.Contains(rr.Why, "without starting over") {
		t.Errorf("a restart answered without an execve: %d %s, want restarted false, state lost, the session ended (error)", code, body)
	}
	if code, body := s.call("POST", "/v1/sessions/"+id+"/exec", api.ExecRequest{Code: ptr("kept")}, nil); code != 410 || bytes.Contains(body, []byte("from before")) {
		t.Errorf("an exec after the restart: %d %s, want 410", code, body)
	}
}

// After a genuine restart the fresh driver's layout is the session's: its
// answers are taken, and a replacement of it is still caught.
func TestRestartedDriverIsCheckedAgain(t *testing.T) {
	s := startServer(t, "--pool", "1")
	id := s.session(api.SessionRequest{}).SessionID
	s.cell(id, "x = 1")
	if code, rr, body := restartCall(t, s, id); code != 200 || !rr.Restarted || rr.State != "fresh" || !rr.Session.Alive {
		t.Fatalf("restart: %d %s", code, body)
	}
	if r := s.cell(id, "6 * 7"); r.Verdict != api.ExecOK || !resultIs(r, "42") || !r.Session.Alive {
		t.Fatalf("an exec after the restart: %s %+v", resultText(r), r)
	}
	cell := cellFrames + fmt.Sprintf("FAKE = %q\nt = tok()\nos.set_inheritable(3, True)\nos.execv(sys.executable, [sys.executable, '-c', FAKE, t])\n", fakeDriver)
	r := s.exec(id, api.ExecRequest{Code: &cell, Timeout: "5s"})
	if r.Verdict != api.ExecFailed || r.State != "lost" || resultIs(r, "'forged'") || r.Session.Alive || !strings.Contains(r.Why, "replaced") {
		t.Errorf("the exec that replaced the restarted driver: %+v, want verdict error, state lost, why naming the replacement", r)
	}
}

// restartForkWindow is c7/c8's cell: a thread blocked on a pipe whose
// write end a canary child holds. The restart's kill(-1) kills the
// canary, never the driver's own threads: this one wakes and forks
// between the kill and the execve, and its grandchild (setsid, init's
// orphan) reads the channel, descriptor 3, into /work/stolen. The cell
// owns the old driver's process, so it widens the window at will: the
// memfd the restart makes after its kill takes a second here.
const restartForkWindow = `import os, threading, time
_memfd = os.memfd_create
def memfd_create(*a):
    time.sleep(1)
    return _memfd(*a)
os.memfd_create = memfd_create
r, w = os.pipe()
if os.fork() == 0:
    os.close(r); time.sleep(3600); os._exit(0)
os.close(w)
def watch():
    os.read(r, 1)
    if os.fork() == 0:
        try:
            if os.fork(): os._exit(0)
            os.setsid()
            time.sleep(0.5)
            while True:
                b = os.read(3, 1 << 20)
                if not b: break
                open('/work/stolen', 'ab').write(b)
        finally:
            os._exit(0)
threading.Thread(target=watch, daemon=True).start()
'armed'`

// A process a cell's thread forks in the restart's window must not
// outlive it: the restart says fresh, and the next exec (its env secret)
// reaches the fresh driver alone, with the jail's init and the driver the
// only processes left.
func TestAttackRestartLeavesForkedSurvivor(t *testing.T) {
	s := startServer(t, "--pool", "1")
	id := s.session(api.SessionRequest{}).SessionID
	if r := s.cell(id, restartForkWindow); !resultIs(r, "'armed'") {
		t.Fatalf("set-up: %+v", r)
	}
	code, body := s.call("POST", "/v1/sessions/"+id+"/restart", nil, nil)
	var rr api.RestartResult
	if code != 200 || json.Unmarshal(body, &rr) != nil || !rr.Restarted || rr.State != "fresh" {
		t.Fatalf("restart: %d %s", code, body)
	}
	// Time for a survivor to be reading the channel (it sleeps 0.5s).
	time.Sleep(2 * time.Second)
	r := s.exec(id, api.ExecRequest{Code: ptr("import os\n[len([p for p in os.listdir('/proc') if p.isdigit()]), os.path.exists('/work/stolen'), os.environ['API_KEY']]"),
		Env: map[string]string{"API_KEY": "k-secret-7"}, Timeout: "20s"})
	if r.Verdict != api.ExecOK || !resultIs(r, "[2, False, 'k-secret-7']") {
		t.Errorf("the exec after the restart (process count, stolen, env): %s %+v", resultText(r), r)
	}
}

// The fresh driver's own kill is the jail's word: a cell that patches
// the old driver's kill and the job it execs (so the fresh one kills
// nothing) leaves a survivor that only the host's reading of the jail's
// processes sees. The restart must not say fresh with it there.
func TestAttackRestartSurvivorPastDriverKill(t *testing.T) {
	s := startServer(t, "--pool", "1")
	id := s.session(api.SessionRequest{}).SessionID
	cell := `import json, os, time
_kill, _dumps = os.kill, json.dumps
def kill(pid, sig):
    if pid != -1:
        return _kill(pid, sig)
def dumps(o, *a, **k):
    if isinstance(o, dict) and o.get('op') == 'session':
        o.pop('restart', None)
    return _dumps(o, *a, **k)
os.kill, json.dumps = kill, dumps
if os.fork() == 0:
    try:
        if os.fork(): os._exit(0)
        os.setsid()
        time.sleep(3600)  # holds the channel; reading it now would race the restart's request
    finally:
        os._exit(0)
os.wait()
'patched'`
	if r := s.cell(id, cell); !resultIs(r, "'patched'") {
		t.Fatalf("set-up: %+v", r)
	}
	code, body := s.call("POST", "/v1/sessions/"+id+"/restart", nil, nil)
	var rr api.RestartResult
	if code != 200 || json.Unmarshal(body, &rr) != nil {
		t.Fatalf("restart: %d %s", code, body)
	}
	if rr.Restarted || rr.State != "lost" || !strings.Contains(rr.Why, "survived the restart") || rr.Session.Alive {
		t.Errorf("a restart that left the cell's process: %s", body)
	}
}

// A child a cell's thread forks after the restart's kill, and that never
// ends, must not make the restart wait on it: the old driver reaps only
// what is already dead (the cell slows its waitpid down so the thread
// forks while it runs), and the fresh one kills and reaps the child.
func TestAttackRestartReapWaitsOnThreadsChild(t *testing.T) {
	s := startServer(t, "--pool", "1")
	id := s.session(api.SessionRequest{}).SessionID
	cell := `import os, threading, time
_waitpid = os.waitpid
def waitpid(*a):
    time.sleep(1)
    return _waitpid(*a)
os.waitpid = waitpid
r, w = os.pipe()
if os.fork() == 0:
    os.close(r); time.sleep(3600); os._exit(0)
os.close(w)
def watch():
    os.read(r, 1)
    if os.fork() == 0:
        time.sleep(3600)
        os._exit(0)
threading.Thread(target=watch, daemon=True).start()
'armed'`
	if r := s.cell(id, cell); !resultIs(r, "'armed'") {
		t.Fatalf("set-up: %+v", r)
	}
	code, body := s.call("POST", "/v1/sessions/"+id+"/restart", nil, nil)
	var rr api.RestartResult
	if code != 200 || json.Unmarshal(body, &rr) != nil || !rr.Restarted || rr.State != "fresh" {
		t.Fatalf("restart: %d %s", code, body)
	}
	if r := s.cell(id, "import os\nlen([p for p in os.listdir('/proc') if p.isdigit()])"); r.Verdict != api.ExecOK || !resultIs(r, "2") {
		t.Errorf("after the restart: %s %+v", resultText(r), r)
	}
}
