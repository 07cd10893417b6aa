package server

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/api"
)

// These tests drive sessions of a real `stockade serve` (real jails, a
// real socket) as a client would, over HTTP.

// call sends method path with body (nil: none; []byte: raw; else JSON)
// and returns the status and the body.
func (s *testServer) call(method, path string, body any, hdr map[string]string) (int, []byte) {
	s.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		r = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			s.t.Fatal(err)
		}
		r = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, "http://stockade"+path, r)
	if err != nil {
		s.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// session makes a session and fails the test unless it gets 201.
func (s *testServer) session(req api.SessionRequest) *api.SessionCreated {
	s.t.Helper()
	code, body := s.call("POST", "/v1/sessions", req, nil)
	if code != 201 {
		s.t.Fatalf("POST /v1/sessions: %d %s\n%s", code, body, s.logString())
	}
	var c api.SessionCreated
	if err := json.Unmarshal(body, &c); err != nil || len(c.SessionID) != 32 {
		s.t.Fatalf("decode %s: %v", body, err)
	}
	return &c
}

// exec runs one cell and fails the test unless it gets 200.
func (s *testServer) exec(id string, req api.ExecRequest) *api.ExecResult {
	s.t.Helper()
	code, body := s.call("POST", "/v1/sessions/"+id+"/exec", req, nil)
	if code != 200 {
		s.t.Fatalf("exec: %d %s", code, body)
	}
	var r api.ExecResult
	if err := json.Unmarshal(body, &r); err != nil {
		s.t.Fatalf("decode %s: %v", body, err)
	}
	return &r
}

func (s *testServer) cell(id, code string) *api.ExecResult {
	s.t.Helper()
	return s.exec(id, api.ExecRequest{Code: &code})
}

func (s *testServer) info(id string) (int, api.SessionInfo) {
	s.t.Helper()
	code, body := s.call("GET", "/v1/sessions/"+id, nil, nil)
	var in api.SessionInfo
	if code == 200 {
		if err := json.Unmarshal(body, &in); err != nil {
			s.t.Fatalf("decode %s: %v", body, err)
		}
	}
	return code, in
}

func resultIs(r *api.ExecResult, want string) bool { return r.Result != nil && *r.Result == want }

func ptr[T any](v T) *T { return &v }

func TestSessionKeepsStateAcrossExecs(t *testing.T) {
	s := startServer(t, "--pool", "1")
	c := s.session(api.SessionRequest{})
	if !c.Pool.Hit || c.Limits.MemoryBytes != 512<<20 || c.Limits.TimeoutMs != 300000 || !c.ExpiresAt.After(c.IdleExpiresAt) {
		t.Errorf("a session of the python profile from the pool: %+v", c)
	}
	id := c.SessionID
	if r := s.cell(id, "x = 1"); r.Verdict != api.ExecOK || r.State != "kept" || r.Result != nil || r.ExecutionCount != 1 {
		t.Errorf("x = 1: %+v", r)
	}
	if r := s.cell(id, "x += 1"); r.Verdict != api.ExecOK || r.Result != nil {
		t.Errorf("x += 1: %+v", r)
	}
	r := s.cell(id, "print('x is', x)\nx")
	if r.Verdict != api.ExecOK || !resultIs(r, "2") || r.Stdout != "x is 2\n" || r.ExecutionCount != 3 {
		t.Errorf("x, as a notebook shows it: %+v", r)
	}
	r = s.cell(id, "import sys\nclass P:\n    def __repr__(self): return 'P!'\nprint('err', file=sys.stderr)\nP()")
	if !resultIs(r, "P!") || r.Stderr != "err\n" {
		t.Errorf("the repr of the last expression, stderr apart: %+v", r)
	}
	if r := s.cell(id, "None"); r.Result != nil {
		t.Errorf("None is not shown: %+v", r)
	}
	r = s.cell(id, "def f():\n    return 1 / 0\nf()")
	if r.Verdict != api.ExecException || r.State != "kept" || r.Error == nil || r.Error.Name != "ZeroDivisionError" ||
		r.Error.Value != "division by zero" || !strings.Contains(r.Error.Traceback, `File "<cell 6>", line 2, in f`) ||
		strings.Contains(r.Error.Traceback, "stockade") {
		t.Errorf("an exception with the cell's traceback, none of the driver's: %+v %+v", r, r.Error)
	}
	if r := s.cell(id, "x"); !resultIs(r, "2") {
		t.Errorf("state after an exception: %+v", r)
	}
	if r := s.cell(id, "raise SystemExit(3)"); r.Verdict != api.ExecException || r.Error.Name != "SystemExit" || r.State != "kept" {
		t.Errorf("sys.exit in a cell is an exception, as in a notebook: %+v", r)
	}
	if r := s.cell(id, "def (:"); r.Verdict != api.ExecException || r.Error.Name != "SyntaxError" || strings.Contains(r.Error.Traceback, "stockade") {
		t.Errorf("a syntax error: %+v %+v", r, r.Error)
	}
	stdin := "line one\nline two\n"
	r = s.exec(id, api.ExecRequest{Code: ptr("import sys\nsys.stdin.read().upper()"), Stdin: stdin})
	if !resultIs(r, "'LINE ONE\\nLINE TWO\\n'") {
		t.Errorf("stdin: %+v", r)
	}
	if r := s.cell(id, "import sys\nsys.stdin.read()"); !resultIs(r, "''") {
		t.Errorf("the next cell's stdin is its own (empty): %+v", r)
	}
	if r := s.cell(id, "import pickle\nclass K: pass\nlen(pickle.dumps(K())) > 0"); !resultIs(r, "True") {
		t.Errorf("a class a cell defines pickles (its namespace is __main__): %+v %+v", r, r.Error)
	}
	code, in := s.info(id)
	if code != 200 || !in.Alive || in.Busy || in.ExecutionCount != 12 || in.MemoryBytes == 0 || in.PeakMemoryBytes < in.MemoryBytes || in.CPUMs <= 0 {
		t.Errorf("GET: %d %+v", code, in)
	}
	code, body := s.call("GET", "/v1/sessions", nil, nil)
	if code != 200 || !bytes.Contains(body, []byte(id)) {
		t.Errorf("GET /v1/sessions: %d %s", code, body)
	}
	code, body = s.call("DELETE", "/v1/sessions/"+id, nil, nil)
	var end api.SessionEnd
	if code != 200 || json.Unmarshal(body, &end) != nil || end.Verdict != api.SessionClosed || end.ExecutionCount != 12 || end.CPUMs <= 0 || end.PeakMemoryBytes == 0 {
		t.Errorf("DELETE: %d %s", code, body)
	}
	code, body = s.call("POST", "/v1/sessions/"+id+"/exec", api.ExecRequest{Code: ptr("x")}, nil)
	if code != 410 || !bytes.Contains(body, []byte("closed by DELETE")) {
		t.Errorf("exec after DELETE: %d %s", code, body)
	}
	if code, _ := s.call("DELETE", "/v1/sessions/"+id, nil, nil); code != 410 {
		t.Errorf("a second DELETE: %d", code)
	}
	if code, _ := s.call("GET", "/v1/sessions/0123456789abcdef0123456789abcdef", nil, nil); code != 404 {
		t.Errorf("an unknown session: %d", code)
	}
}

// The exec's timeout is a KeyboardInterrupt: an interpreter that answers
// keeps its state, and says so.
func TestSessionTimeoutKeepsState(t *testing.T) {
	s := startServer(t, "--pool", "1")
	id := s.session(api.SessionRequest{}).SessionID
	s.cell(id, "x = 1")
	r := s.exec(id, api.ExecRequest{Code: ptr("print('started', flush=True)\nwhile True: pass"), Timeout: "1s"})
	if r.Verdict != api.ExecTimeout || r.State != "kept" || r.Error == nil || r.Error.Name != "KeyboardInterrupt" || r.Stdout != "started\n" || r.WallMs < 1000 {
		t.Errorf("timeout: %+v", r)
	}
	if r := s.cell(id, "x"); r.Verdict != api.ExecOK || !resultIs(r, "1") {
		t.Errorf("state after the timeout: %+v", r)
	}
	// A CPU-time limit is each exec's, as the timeout is.
	id = s.session(api.SessionRequest{Limits: api.Limits{"cpu_time": "500ms"}}).SessionID
	s.cell(id, "y = 5")
	r = s.exec(id, api.ExecRequest{Code: ptr("while True: pass")})
	if r.Verdict != api.ExecTimeout || r.State != "kept" || !strings.Contains(r.Why, "CPU time") || r.CPUMs < 400 {
		t.Errorf("CPU time: %+v", r)
	}
	for i := 0; i < 3; i++ {
		// Each exec has the whole CPU time: the jail's own limit would
		// have ended the session by now.
		if r := s.exec(id, api.ExecRequest{Code: ptr("import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\ny")}); !resultIs(r, "5") {
			t.Errorf("exec %d under the CPU time: %+v", i, r)
		}
	}
}

// A thread blocked in C code never sees KeyboardInterrupt: after the
// grace the session is killed, and the answer says the state is lost.
func TestSessionBlockedInCLosesState(t *testing.T) {
	s := startServer(t, "--pool", "1")
	for name, cell := range map[string]string{
		"SIGINT blocked, sigwait":            "import signal\nsignal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})\nsignal.sigwait({signal.SIGUSR1})",
		"select, interrupt caught in a loop": "import select\nwhile True:\n    try:\n        select.select([], [], [], 100)\n    except KeyboardInterrupt:\n        pass",
	} {
		id := s.session(api.SessionRequest{}).SessionID
		s.cell(id, "x = 1")
		r := s.exec(id, api.ExecRequest{Code: &cell, Timeout: "1s"})
		if r.Verdict != api.ExecTimeout || r.State != "lost" || r.Session.Alive || r.Session.Ended != api.SessionTimeout || !strings.Contains(r.Why, "did not answer") {
			t.Errorf("%s: %+v", name, r)
		}
		if r.WallMs > 1000+float64(interruptGrace/time.Millisecond)+3000 {
			t.Errorf("%s: killed after %.0f ms", name, r.WallMs)
		}
		code, body := s.call("POST", "/v1/sessions/"+id+"/exec", api.ExecRequest{Code: ptr("x")}, nil)
		if code != 410 || !bytes.Contains(body, []byte("did not answer KeyboardInterrupt")) {
			t.Errorf("%s: the next exec: %d %s", name, code, body)
		}
	}
}

func TestSessionInterrupt(t *testing.T) {
	s := startServer(t, "--pool", "1")
	id := s.session(api.SessionRequest{}).SessionID
	if code, body := s.call("POST", "/v1/sessions/"+id+"/interrupt", nil, nil); code != 409 {
		t.Errorf("interrupt while idle: %d %s", code, body)
	}
	s.cell(id, "x = 'kept'")
	done := make(chan *api.ExecResult, 1)
	go func() { done <- s.cell(id, "import time\ntime.sleep(30)") }()
	eventually(t, "the exec runs", func() bool { _, in := s.info(id); return in.Busy })
	if code, body := s.call("POST", "/v1/sessions/"+id+"/interrupt", nil, nil); code != 202 {
		t.Errorf("interrupt: %d %s", code, body)
	}
	select {
	case r := <-done:
		if r.Verdict != api.ExecInterrupted || r.State != "kept" || r.Error == nil || r.Error.Name != "KeyboardInterrupt" || r.WallMs > 10000 {
			t.Errorf("interrupted: %+v", r)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the interrupted exec did not end")
	}
	if r := s.cell(id, "x"); !resultIs(r, "'kept'") {
		t.Errorf("state after the interrupt: %+v", r)
	}
}

// Execs of one session run one at a time; the next waits --queue-wait,
// then 409. And what each exec reports of itself alone: its output cut at
// the limit, the calls it had refused, its network attempts, its audit
// line.
func TestSessionBusy(t *testing.T) {
	audit := filepath.Join(t.TempDir(), "audit.log")
	s := startServer(t, "--pool", "1", "--queue-wait", "1s", "--audit-log", audit)
	id := s.session(api.SessionRequest{Limits: api.Limits{"output": "1K"}}).SessionID
	r := s.cell(id, "print('x' * 5000)\n'after'")
	if r.Verdict != api.ExecOutput || r.State != "kept" || len(r.Stdout) != 1024 || !r.StdoutTruncated || r.StdoutBytes != 5001 || !resultIs(r, "'after'") {
		t.Errorf("output past the limit: %s %v %d %d", r.Verdict, r.StdoutTruncated, len(r.Stdout), r.StdoutBytes)
	}
	if r := s.cell(id, "print('y')"); r.Verdict != api.ExecOK || r.Stdout != "y\n" {
		t.Errorf("the next exec's output is its own: %+v", r)
	}
	r = s.cell(id, "import ctypes, socket\nctypes.CDLL(None).syscall(165, 0, 0, 0, 0, 0)\nc = socket.socket()\nc.settimeout(1)\ntry:\n    c.connect(('192.0.2.1', 80))\nexcept OSError as e:\n    print(type(e).__name__)")
	if len(r.BlockedSyscalls) != 1 || r.BlockedSyscalls[0].Name != "mount" || len(r.Network) != 1 || r.Network[0].Host != "192.0.2.1" {
		t.Errorf("the exec's refused calls and network attempts: %+v %+v", r.BlockedSyscalls, r.Network)
	}
	if r := s.cell(id, "1"); len(r.BlockedSyscalls) != 0 || len(r.Network) != 0 {
		t.Errorf("the next exec's are its own: %+v %+v", r.BlockedSyscalls, r.Network)
	}
	done := make(chan *api.ExecResult, 1)
	go func() { done <- s.cell(id, "import time\ntime.sleep(4)\n'first'") }()
	eventually(t, "the exec runs", func() bool { _, in := s.info(id); return in.Busy })
	code, body := s.call("POST", "/v1/sessions/"+id+"/exec", api.ExecRequest{Code: ptr("1")}, nil)
	if code != 409 || !bytes.Contains(body, []byte("busy")) {
		t.Errorf("a second exec: %d %s", code, body)
	}
	if r := <-done; !resultIs(r, "'first'") {
		t.Errorf("the first: %+v", r)
	}
	if r := s.cell(id, "2"); !resultIs(r, "2") {
		t.Errorf("after: %+v", r)
	}
	s.call("DELETE", "/v1/sessions/"+id, nil, nil)
	b, _ := os.ReadFile(audit)
	events := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var e AuditEntry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		if e.SessionID == id {
			events[e.Event]++
			if e.Event == "exec_end" && (len(e.CodeSHA256) != 64 || e.AuditOutcome == nil || e.State == "" || !strings.HasPrefix(e.RunID, id+"/")) {
				t.Errorf("exec line %s", line)
			}
		}
	}
	if events["session_start"] != 1 || events["exec_end"] != 6 || events["session_end"] != 1 {
		t.Errorf("audit events of the session: %v", events)
	}
}

// An OOM kill ends the session with verdict memory; its /work stays
// readable until DELETE.
func TestSessionOOMEndsWithMemoryWorkReadable(t *testing.T) {
	s := startServer(t, "--pool", "0")
	c := s.session(api.SessionRequest{Limits: api.Limits{"memory": "128M"}, Files: map[string]string{"in/data.txt": base64.StdEncoding.EncodeToString([]byte("input"))}})
	id := c.SessionID
	if c.Pool.Hit || c.Limits.MemoryBytes != 128<<20 {
		t.Errorf("limits: %+v", c)
	}
	s.cell(id, "open('out.txt', 'w').write('written before')")
	r := s.cell(id, "blocks = []\nwhile True:\n    blocks.append(b'x' * (8 << 20))")
	if r.Verdict != api.ExecMemory || r.State != "lost" || r.Session.Alive || r.Session.Ended != api.SessionMemory {
		t.Errorf("OOM: %+v", r)
	}
	code, in := s.info(id)
	if code != 200 || in.Alive || in.Verdict != api.SessionMemory || in.EndedAt == nil {
		t.Errorf("GET after the OOM kill: %d %+v", code, in)
	}
	for p, want := range map[string]string{"out.txt": "written before", "in/data.txt": "input"} {
		if code, body := s.call("GET", "/v1/sessions/"+id+"/files/"+p, nil, nil); code != 200 || string(body) != want {
			t.Errorf("GET %s after the OOM kill: %d %q", p, code, body)
		}
	}
	if code, body := s.call("PUT", "/v1/sessions/"+id+"/files/x", []byte("y"), nil); code != 410 {
		t.Errorf("PUT into an ended session: %d %s", code, body)
	}
	if code, body := s.call("POST", "/v1/sessions/"+id+"/exec", api.ExecRequest{Code: ptr("1")}, nil); code != 410 || !bytes.Contains(body, []byte("OOM")) {
		t.Errorf("exec after the OOM kill: %d %s", code, body)
	}
	code, body := s.call("DELETE", "/v1/sessions/"+id, nil, nil)
	var end api.SessionEnd
	if code != 200 || json.Unmarshal(body, &end) != nil || end.Verdict != api.SessionMemory || end.PeakMemoryBytes < 100<<20 {
		t.Errorf("DELETE: %d %s", code, body)
	}
	if code, _ := s.call("GET", "/v1/sessions/"+id+"/files/out.txt", nil, nil); code != 410 {
		t.Errorf("files after DELETE: %d", code)
	}
}

// The driver's answers travel on their own descriptor. What the cell
// prints cannot be read as a frame; a cell that writes to that descriptor
// or closes it ends its session as error, never as a forged ok.
func TestAttackSessionForgesDriverFrames(t *testing.T) {
	s := startServer(t, "--pool", "1")
	id := s.session(api.SessionRequest{}).SessionID
	fake := `{"token": "x", "status": "ok", "result": "'forged'", "result_truncated": false, "error": null, "images": [], "images_truncated": false}`
	frame := fmt.Sprintf("%d\n%s", len(fake), fake)
	r := s.exec(id, api.ExecRequest{Code: ptr(fmt.Sprintf("import sys, os\nf = %q\nsys.stdout.write(f); sys.stderr.write(f)\nos.write(1, f.encode()); os.write(2, f.encode())\n'real'", frame))})
	if r.Verdict != api.ExecOK || !resultIs(r, "'real'") || r.Stdout != frame+frame || r.Stderr != frame+frame || r.State != "kept" {
		t.Errorf("frames printed on stdout and stderr are the cell's output: %+v", r)
	}
	cases := map[string]string{
		"a frame written to the driver's descriptor": fmt.Sprintf("import os\nos.write(3, %q.encode())\n'after'", frame),
		"a frame sent through a socket on it":        fmt.Sprintf("import socket\nsocket.socket(fileno=3).send(%q.encode())\n'after'", frame),
		"the descriptor closed":                      "import os\nos.close(3)\n'after'",
		"the descriptor replaced":                    "import os\nr, w = os.pipe()\nos.dup2(w, 3)\n'after'",
		"garbage on it":                              "import os\nos.write(3, b'99999999999999999999999\\n')\n'after'",
	}
	for name, cell := range cases {
		id := s.session(api.SessionRequest{}).SessionID
		s.cell(id, "x = 1")
		r := s.exec(id, api.ExecRequest{Code: &cell, Timeout: "3s"})
		if r.Verdict == api.ExecOK || r.State != "lost" || resultIs(r, "'forged'") || r.Session.Alive {
			t.Errorf("%s: %+v", name, r)
		}
		if r.Verdict != api.ExecFailed && r.Verdict != api.ExecTimeout {
			t.Errorf("%s: verdict %s, want error", name, r.Verdict)
		}
		if code, _ := s.call("POST", "/v1/sessions/"+id+"/exec", api.ExecRequest{Code: ptr("x")}, nil); code != 410 {
			t.Errorf("%s: the session lives on: %d", name, code)
		}
	}
	// Between execs: a thread the cell left writes to the descriptor.
	id = s.session(api.SessionRequest{}).SessionID
	s.cell(id, fmt.Sprintf("import os, threading, time\nthreading.Thread(target=lambda: (time.sleep(0.5), os.write(3, %q.encode()))).start()", frame))
	time.Sleep(time.Second)
	if code, body := s.call("POST", "/v1/sessions/"+id+"/exec", api.ExecRequest{Code: ptr("1")}, nil); code != 410 || bytes.Contains(body, []byte("forged")) {
		t.Errorf("a frame written between execs: the next exec gets %d %s, want 410 (the session ended)", code, body)
	}
}

// A session is its creator's: any other uid gets 404 for every route, as
// for a session that does not exist.
func TestAttackSessionOtherUID(t *testing.T) {
	s := startServer(t, "--pool", "1", "--group", "nogroup")
	id := s.session(api.SessionRequest{Files: map[string]string{"secret.txt": base64.StdEncoding.EncodeToString([]byte("root's"))}}).SessionID
	s.cell(id, "secret = 'root only'")
	as := func(uid uint32, method, path string, body string) (int, string) {
		args := []string{"-s", "-o", "-", "-w", "\n%{http_code}", "--unix-socket", s.sock, "-X", method}
		if body != "" {
			args = append(args, "-d", body)
		}
		cmd := exec.Command("curl", append(args, "http://x"+path)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: 65534}}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("curl as uid %d: %v %s", uid, err, out)
		}
		i := bytes.LastIndexByte(out, '\n')
		var code int
		fmt.Sscan(string(out[i+1:]), &code)
		return code, string(out[:i])
	}
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/sessions/" + id, ""},
		{"POST", "/v1/sessions/" + id + "/exec", `{"code": "secret"}`},
		{"POST", "/v1/sessions/" + id + "/interrupt", ""},
		{"POST", "/v1/sessions/" + id + "/ttl", `{"ttl": "1m"}`},
		{"POST", "/v1/sessions/" + id + "/restart", ""},
		{"GET", "/v1/sessions/" + id + "/files/secret.txt", ""},
		{"GET", "/v1/sessions/" + id + "/files?path=.", ""},
		{"PUT", "/v1/sessions/" + id + "/files/planted.txt", "x"},
		{"DELETE", "/v1/sessions/" + id + "/files/secret.txt", ""},
		{"DELETE", "/v1/sessions/" + id, ""},
	} {
		code, body := as(65534, c.method, c.path, c.body)
		if code != 404 || strings.Contains(body, "root") {
			t.Errorf("uid 65534: %s %s: %d %s", c.method, c.path, code, body)
		}
	}
	if code, body := as(65534, "GET", "/v1/sessions", ""); code != 200 || strings.Contains(body, id) {
		t.Errorf("uid 65534 lists: %d %s", code, body)
	}
	// Its own session works, and root sees that one no more than it saw root's.
	code, body := as(65534, "POST", "/v1/sessions", `{}`)
	var c api.SessionCreated
	if code != 201 || json.Unmarshal([]byte(body), &c) != nil {
		t.Fatalf("uid 65534 makes a session: %d %s", code, body)
	}
	if code, _ := s.info(c.SessionID); code != 404 {
		t.Errorf("root GETs uid 65534's session: %d", code)
	}
	if code, body := as(65534, "POST", "/v1/sessions/"+c.SessionID+"/exec", `{"code": "6*7"}`); code != 200 || !strings.Contains(body, `"result":"42"`) {
		t.Errorf("uid 65534 execs in its own: %d %s", code, body)
	}
	if r := s.cell(id, "secret"); !resultIs(r, "'root only'") {
		t.Errorf("root's session after all that: %+v", r)
	}
	// Closed, it answers its owner 410 and why; any other uid still 404,
	// as for a session that never was.
	if code, _ := s.call("DELETE", "/v1/sessions/"+id, nil, nil); code != 200 {
		t.Fatalf("DELETE: %d", code)
	}
	if code, _ := s.call("GET", "/v1/sessions/"+id, nil, nil); code != 410 {
		t.Errorf("its owner GETs the closed session: %d, want 410", code)
	}
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/sessions/" + id, ""},
		{"POST", "/v1/sessions/" + id + "/exec", `{"code": "secret"}`},
		{"DELETE", "/v1/sessions/" + id, ""},
	} {
		if code, body := as(65534, c.method, c.path, c.body); code != 404 || strings.Contains(body, "closed") || strings.Contains(body, "ended") {
			t.Errorf("uid 65534: %s %s of a closed session: %d %s, want 404 and nothing of its end", c.method, c.path, code, body)
		}
	}
}

// Ceilings: what a request may ask for is at most the server's (422);
// sessions held are capped per caller (429) and in all (503).
func TestSessionCeilings(t *testing.T) {
	s := startServer(t, "--pool", "0", "--group", "nogroup", "--session-idle", "5s", "--session-ttl", "20s",
		"--sessions", "2", "--sessions-per-caller", "1")
	for _, req := range []api.SessionRequest{
		{IdleTimeout: "10s"}, {TTL: "1m"}, {Limits: api.Limits{"memory": "64G"}}, {Limits: api.Limits{"timeout": "1h"}}, {Limits: api.Limits{"pids": 100000}},
	} {
		if code, body := s.call("POST", "/v1/sessions", req, nil); code != 422 || !bytes.Contains(body, []byte("ceiling")) {
			t.Errorf("%+v: %d %s", req, code, body)
		}
	}
	for _, bad := range []string{`{"ttl": "soon"}`, `{"files": {"../x": ""}}`, `{"files": {"/etc/x": ""}}`, `{"env": {"A=B": "c"}}`, `{"unknown": 1}`, `{"profile": "nope"}`} {
		if code, body := s.call("POST", "/v1/sessions", []byte(bad), nil); code != 400 {
			t.Errorf("%s: %d %s", bad, code, body)
		}
	}
	c := s.session(api.SessionRequest{IdleTimeout: "5s", TTL: "20s"})
	if c.Limits.IdleTimeoutMs != 5000 || c.Limits.TTLMs != 20000 {
		t.Errorf("limits %+v", c.Limits)
	}
	if code, body := s.call("POST", "/v1/sessions/"+c.SessionID+"/exec", api.ExecRequest{Code: ptr("1"), Timeout: "6m"}, nil); code != 422 {
		t.Errorf("an exec's timeout above the session's: %d %s", code, body)
	}
	if code, body := s.call("POST", "/v1/sessions", api.SessionRequest{}, nil); code != 429 || !bytes.Contains(body, []byte("--sessions-per-caller")) {
		t.Errorf("a second session of one caller: %d %s", code, body)
	}
	curlAs := func(uid string) (int, string) {
		out, _ := exec.Command("setpriv", "--reuid", uid, "--regid", "65534", "--clear-groups",
			"curl", "-s", "-w", "\n%{http_code}", "--unix-socket", s.sock, "-d", `{}`, "http://x/v1/sessions").Output()
		i := bytes.LastIndexByte(out, '\n')
		var code int
		fmt.Sscan(string(out[i+1:]), &code)
		return code, string(out[:i])
	}
	if code, body := curlAs("65534"); code != 201 {
		t.Errorf("another caller's first: %d %s", code, body)
	}
	if code, body := curlAs("4242"); code != 503 || !strings.Contains(body, "--sessions") {
		t.Errorf("past --sessions: %d %s", code, body)
	}
	s.call("DELETE", "/v1/sessions/"+c.SessionID, nil, nil)
	if code, body := s.call("POST", "/v1/sessions", api.SessionRequest{}, nil); code != 201 {
		t.Errorf("after a DELETE: %d %s", code, body)
	}
}

// Sessions count against --budget-memory as pooled jails do.
func TestSessionBudget(t *testing.T) {
	s := startServer(t, "--pool", "0", "--budget-memory", "1G", "--queue-wait", "1s")
	a := s.session(api.SessionRequest{})
	s.session(api.SessionRequest{})
	if code, body := s.call("POST", "/v1/sessions", api.SessionRequest{}, nil); code != 503 || !bytes.Contains(body, []byte("budget")) {
		t.Errorf("a third 512M session in a 1G budget: %d %s", code, body)
	}
	s.call("DELETE", "/v1/sessions/"+a.SessionID, nil, nil)
	if code, body := s.call("POST", "/v1/sessions", api.SessionRequest{}, nil); code != 201 {
		t.Errorf("after a DELETE: %d %s", code, body)
	}
}

func TestSessionIdleAndTTLExpiry(t *testing.T) {
	s := startServer(t, "--pool", "0")
	// Every deadline is measured from when the create answered, which is
	// after the server started the session's clocks: the session has
	// surely expired by then, however slow a loaded host made the creates.
	ttl := s.session(api.SessionRequest{TTL: "3s"}).SessionID
	ttlBy := time.Now().Add(3 * time.Second)
	idle := s.session(api.SessionRequest{IdleTimeout: "1s"}).SessionID
	idleBy := time.Now().Add(time.Second)
	// Requests keep a session from going idle, not from its lifetime.
	for time.Now().Before(ttlBy) {
		if code, body := s.call("POST", "/v1/sessions/"+ttl+"/exec", api.ExecRequest{Code: ptr("1")}, nil); code != 200 {
			if code != 410 || !bytes.Contains(body, []byte("(ttl)")) {
				t.Fatalf("an exec within the ttl: %d %s", code, body)
			}
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(time.Until(ttlBy.Add(500 * time.Millisecond)))
	time.Sleep(time.Until(idleBy.Add(500 * time.Millisecond)))
	for id, why := range map[string]string{idle: "(idle)", ttl: "(ttl)"} {
		code, body := s.call("POST", "/v1/sessions/"+id+"/exec", api.ExecRequest{Code: ptr("x")}, nil)
		if code != 410 || !bytes.Contains(body, []byte(why)) {
			t.Errorf("%s: %d %s", why, code, body)
		}
	}
}

func TestSessionPlotImages(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-c", "import matplotlib").Run(); err != nil {
		t.Skip("matplotlib is not installed (python3-matplotlib)")
	}
	s := startServer(t, "--pool", "1")
	id := s.session(api.SessionRequest{}).SessionID
	r := s.cell(id, "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.figure()\nplt.bar([1, 2], [3, 4])\nplt.close(plt.figure())")
	if r.Verdict != api.ExecOK || len(r.Images) != 2 {
		t.Fatalf("two figures: %+v", r)
	}
	for i, img := range r.Images {
		b, _ := base64.StdEncoding.DecodeString(img.Data)
		if _, err := png.Decode(bytes.NewReader(b)); err != nil || img.Type != "png" {
			t.Errorf("image %d: %v", i, err)
		}
	}
	if r := s.cell(id, "plt.get_fignums()"); len(r.Images) != 0 || !resultIs(r, "[]") {
		t.Errorf("the figures were closed after the exec: %+v", r)
	}
	if r := s.cell(id, "import matplotlib\nmatplotlib.get_backend()"); !resultIs(r, "'agg'") {
		t.Errorf("backend: %+v", r)
	}
}

// /work through the files routes: nested paths in and out, the jail's own
// files, and whatever the jail planted, never followed.
func TestAttackSessionFilesSymlinks(t *testing.T) {
	s := startServer(t, "--pool", "1")
	id := s.session(api.SessionRequest{}).SessionID
	base := "/v1/sessions/" + id + "/files/"
	if code, body := s.call("PUT", base+"data/in/numbers.csv", []byte("a,b\n1,2\n"), nil); code != 201 {
		t.Fatalf("PUT: %d %s", code, body)
	}
	r := s.cell(id, "import os, pathlib\nst = os.stat('data/in/numbers.csv')\nprint(st.st_uid == os.getuid(), pathlib.Path('data/in/numbers.csv').read_text().count(','))\nopen('data/in/numbers.csv', 'a').write('3,4\\n')\nos.makedirs('out/deep')\nopen('out/deep/r.txt', 'w').write('result')")
	if r.Stdout != "True 2\n" || strings.Join(r.FilesChanged, " ") != "data/in/numbers.csv out/deep/r.txt" {
		t.Errorf("the jail owns what the server wrote, and files_changed: %+v", r)
	}
	if code, body := s.call("GET", base+"out/deep/r.txt", nil, nil); code != 200 || string(body) != "result" {
		t.Errorf("GET nested: %d %q", code, body)
	}
	if code, body := s.call("GET", base+"data/in/numbers.csv", nil, nil); code != 200 || string(body) != "a,b\n1,2\n3,4\n" {
		t.Errorf("GET: %d %q", code, body)
	}
	secret, _ := os.ReadFile("/etc/shadow")
	// The canary's name is this run's own: a fixed /tmp/planted would fail
	// a second test run on the host, or hide a real plant.
	plant := fmt.Sprintf("stockade-planted-%d-%d", os.Getpid(), time.Now().UnixNano())
	s.cell(id, "import os\nos.symlink('/etc/shadow', 'shadow')\nos.symlink('/etc', 'etc')\nos.symlink('/', 'out/root')\nos.mkfifo('fifo')")
	for _, c := range []struct {
		method, path string
		want         int
	}{
		{"GET", "shadow", 403}, {"GET", "etc/passwd", 403}, {"GET", "out/root/etc/shadow", 403},
		{"PUT", "shadow", 403}, {"PUT", "etc/" + plant, 403}, {"PUT", "out/root/tmp/" + plant, 403},
		{"GET", "fifo", 400}, {"PUT", "fifo", 409}, {"GET", "out", 400},
		{"GET", "out%2F..%2F..%2Fetc%2Fpasswd", 400}, {"GET", "%2Fetc%2Fpasswd", 400}, {"PUT", "out%2F..%2F..%2Fplanted", 400},
		{"GET", "nothing", 404},
	} {
		code, body := s.call(c.method, base+c.path, []byte("x"), nil)
		if code != c.want || (len(secret) > 0 && bytes.Contains(body, secret[:min(len(secret), 16)])) {
			t.Errorf("%s %s: %d %q, want %d", c.method, c.path, code, body, c.want)
		}
	}
	// A path with ".." never reaches /work: the router cleans it away from
	// the session's routes.
	if code, _ := s.call("GET", base+"../../../../etc/passwd", nil, nil); code != 404 {
		t.Errorf("GET with ..: %d", code)
	}
	if code, body := s.call("GET", "/v1/sessions/"+id+"/files?path=etc", nil, nil); code != 403 {
		t.Errorf("list through a symlink: %d %s", code, body)
	}
	code, body := s.call("GET", "/v1/sessions/"+id+"/files?path=.", nil, nil)
	var list api.FileList
	if code != 200 || json.Unmarshal(body, &list) != nil || len(list.Entries) != 5 {
		t.Errorf("list: %d %s", code, body)
	}
	for _, e := range list.Entries {
		if want := map[string]string{"shadow": "symlink", "etc": "symlink", "fifo": "other", "data": "dir", "out": "dir"}[string(e.Name)]; want != "" && e.Type != want {
			t.Errorf("entry %+v, want %s", e, want)
		}
	}
	if code, _ := s.call("DELETE", base+"shadow", nil, nil); code != 200 {
		t.Errorf("DELETE a symlink: %d", code)
	}
	if b, _ := os.ReadFile("/etc/shadow"); !bytes.Equal(b, secret) {
		t.Errorf("/etc/shadow changed")
	}
	for _, p := range []string{"/etc/" + plant, "/tmp/" + plant} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s planted on the host", p)
		}
	}
	if r := s.cell(id, "import os\nsorted(os.listdir('.'))"); !resultIs(r, "['data', 'etc', 'fifo', 'out']") {
		t.Errorf("after: %+v", r)
	}
}

// NDJSON: the cell's output as it comes, then the result.
func TestSessionStreamsNDJSON(t *testing.T) {
	s := startServer(t, "--pool", "1")
	id := s.session(api.SessionRequest{}).SessionID
	code, body := s.call("POST", "/v1/sessions/"+id+"/exec", api.ExecRequest{Code: ptr("import sys, time\nprint('one')\ntime.sleep(0.2)\nprint('two', file=sys.stderr)\n42")}, map[string]string{"Accept": api.NDJSON})
	lines := strings.Split(strings.TrimSpace(string(body)), "\n")
	if code != 200 || len(lines) < 3 {
		t.Fatalf("%d %s\n%s", code, body, s.logString())
	}
	// Chunks are as the cell wrote them ("one", then its newline, may come
	// apart); stdout's all come before the sleep, stderr's after.
	var got = map[string]string{}
	lastOut, firstErr := -1, -1
	for i, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		switch typ := m["type"]; {
		case i == len(lines)-1:
			if typ != "result" || m["result"] != "42" || m["verdict"] != "ok" || m["stdout"] != "one\n" {
				t.Errorf("the last line: %v", m)
			}
		case typ == "stdout":
			got["stdout"] += m["data"].(string)
			lastOut = i
		case typ == "stderr":
			got["stderr"] += m["data"].(string)
			if firstErr < 0 {
				firstErr = i
			}
		default:
			t.Errorf("line %d: %v", i, m)
		}
	}
	if got["stdout"] != "one\n" || got["stderr"] != "two\n" || lastOut > firstErr {
		t.Errorf("events: %q", lines)
	}
}

// parseMetrics reads the Prometheus text format: "# HELP" and "# TYPE"
// lines, and samples "name{label="v",...} value".
func parseMetrics(t *testing.T, text string) (map[string]float64, map[string]string) {
	t.Helper()
	samples, types := map[string]float64{}, map[string]string{}
	for i, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		if strings.HasPrefix(line, "# ") {
			f := strings.SplitN(line, " ", 4)
			if len(f) != 4 || (f[1] != "HELP" && f[1] != "TYPE") {
				t.Fatalf("line %d: %q", i+1, line)
			}
			if f[1] == "TYPE" {
				types[f[2]] = f[3]
			}
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			t.Fatalf("line %d: no value: %q", i+1, line)
		}
		key := line[:sp]
		var v float64
		if _, err := fmt.Sscan(line[sp+1:], &v); err != nil {
			t.Fatalf("line %d: value: %q", i+1, line)
		}
		name := key
		if j := strings.IndexByte(key, '{'); j >= 0 {
			if !strings.HasSuffix(key, "}") {
				t.Fatalf("line %d: labels: %q", i+1, line)
			}
			for _, l := range strings.Split(key[j+1:len(key)-1], ",") {
				kv := strings.SplitN(l, "=", 2)
				if len(kv) != 2 || len(kv[1]) < 2 || kv[1][0] != '"' || kv[1][len(kv[1])-1] != '"' {
					t.Fatalf("line %d: label %q", i+1, l)
				}
			}
			name = key[:j]
		}
		fam := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
		if types[name] == "" && types[fam] == "" {
			t.Fatalf("line %d: a sample of no declared family: %q", i+1, line)
		}
		if _, dup := samples[key]; dup {
			t.Fatalf("line %d: sample given twice: %q", i+1, line)
		}
		samples[key] = v
	}
	return samples, types
}

func TestSessionMetrics(t *testing.T) {
	s := startServer(t, "--pool", "1")
	id := s.session(api.SessionRequest{}).SessionID
	s.cell(id, "1")
	s.cell(id, "1/0")
	// The session took the pool's jail; the run is a hit only once the pool
	// has refilled (CI's run raced it and counted a miss).
	s.waitReady()
	s.run(api.RunRequest{Code: code("print(1)")})
	s.call("DELETE", "/v1/sessions/"+id, nil, nil)
	resp, err := s.hc.Get("http://stockade/v1/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q", resp.Header.Get("Content-Type"))
	}
	m, types := parseMetrics(t, string(b))
	for key, want := range map[string]float64{
		`stockade_pool_target{profile="python"}`:          1,
		`stockade_sessions_created_total{pool="hit"}`:     1,
		`stockade_sessions_ended_total{verdict="closed"}`: 1,
		`stockade_execs_total{verdict="ok"}`:              1,
		`stockade_execs_total{verdict="exception"}`:       1,
		`stockade_runs_total{verdict="ok"}`:               1,
		`stockade_sessions_live`:                          0,
		`stockade_exec_seconds_count`:                     2,
		`stockade_session_create_seconds_count`:           1,
	} {
		if got, ok := m[key]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", key, got, ok, want)
		}
	}
	if m[`stockade_pool_hits_total{profile="python"}`] < 2 || m["stockade_budget_memory_used_bytes"] <= 0 {
		t.Errorf("pool hits and budget: %v", m)
	}
	for _, h := range []string{"stockade_run_seconds", "stockade_exec_seconds", "stockade_session_create_seconds"} {
		if types[h] != "histogram" {
			t.Errorf("%s: type %q", h, types[h])
		}
		prev := -1.0
		for _, le := range latencyBuckets {
			v := m[fmt.Sprintf(`%s_bucket{le="%s"}`, h, fmt.Sprint(le))]
			if v < prev {
				t.Errorf("%s: buckets not cumulative at %v", h, le)
			}
			prev = v
		}
		if inf := m[h+`_bucket{le="+Inf"}`]; inf != m[h+"_count"] || inf < prev {
			t.Errorf("%s: +Inf %v, count %v", h, inf, m[h+"_count"])
		}
	}
}

// kill -9 of a server with live sessions: their jails die with it, and the
// next server's start removes what they left.
func TestSessionKill9LeavesNothingAfterNextStart(t *testing.T) {
	bin := needServer(t)
	sock := filepath.Join(socketDir(t), "s.sock")
	a := startServerAt(t, bin, sock, "--pool", "1")
	var ids []string
	for i := 0; i < 2; i++ {
		id := a.session(api.SessionRequest{}).SessionID
		a.cell(id, "open('f', 'w').write('x' * 1000)")
		ids = append(ids, id)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		code := "import time\ntime.sleep(60)"
		b, _ := json.Marshal(api.ExecRequest{Code: &code})
		if resp, err := a.hc.Post("http://stockade/v1/sessions/"+ids[0]+"/exec", "application/json", bytes.NewReader(b)); err == nil {
			resp.Body.Close()
		}
	}()
	eventually(t, "the exec runs", func() bool { _, in := a.info(ids[0]); return in.Busy })
	pid := a.cmd.Process.Pid
	if len(descendantsWith(pid, "jailinit")) < 3 {
		t.Logf("jails before the kill: %v", descendantsWith(pid, "jailinit"))
	}
	a.cmd.Process.Kill()
	<-a.exited
	wg.Wait()
	b := startServerAt(t, bin, sock, "--pool", "1")
	eventually(t, "the killed server's leftovers swept", func() bool { return len(leftovers(pid, a.before)) == 0 })
	if left := leftovers(pid, a.before); len(left) > 0 {
		t.Errorf("after the next start: %v", left)
	}
	if r := b.cell(b.session(api.SessionRequest{}).SessionID, "6*7"); !resultIs(r, "42") {
		t.Errorf("%+v", r)
	}
}

// SIGTERM with live sessions (one running an exec): every jail, cgroup and
// run directory is removed before the server exits.
func TestSessionSIGTERMLeavesNothing(t *testing.T) {
	s := startServer(t, "--pool", "1", "--grace", "1s")
	id := s.session(api.SessionRequest{}).SessionID
	s.session(api.SessionRequest{})
	go func() {
		code := "import time\ntime.sleep(60)"
		b, _ := json.Marshal(api.ExecRequest{Code: &code})
		if resp, err := s.hc.Post("http://stockade/v1/sessions/"+id+"/exec", "application/json", bytes.NewReader(b)); err == nil {
			resp.Body.Close()
		}
	}()
	eventually(t, "the exec runs", func() bool { _, in := s.info(id); return in.Busy })
	s.stop() // checks that nothing is left
	if !strings.Contains(s.logString(), "stopped: every jail, cgroup and run directory removed") {
		t.Errorf("log:\n%s", s.logString())
	}
}
