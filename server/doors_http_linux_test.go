package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/profiles"
)

// A caller sends the head of a request and a few bytes of a small body,
// then stalls. The handler's body deadline ran out and it wrote its 408,
// but net/http reads what is left of a small unread body before it
// answers, to keep the connection, with no deadline: the 408 never came
// and the connection (a goroutine, a place under --max-conns) was held
// for ever. Each route that reads a body answers and closes, and so does
// one that refuses before it reads.
func TestAttackStalledSmallBodyHoldsConnection(t *testing.T) {
	s := startServer(t, "--pool", "0", "--body-timeout", "1s")
	id := s.session(api.SessionRequest{}).SessionID
	for _, route := range []struct {
		method, path string
		want         int
	}{
		{"POST", "/v1/run", 408},
		{"POST", "/v1/sessions", 408},
		{"POST", "/v1/sessions/" + id + "/exec", 408},
		{"PUT", "/v1/sessions/" + id + "/files/stalled.txt", 408},
		{"POST", "/v1/mcp", 408},
		// Refused before the body is read: the same drain followed.
		{"PUT", "/v1/sessions/00000000000000000000000000000000/files/x", 404},
		{"POST", "/v1/health", 405},
	} {
		c, err := net.Dial("unix", s.sock)
		if err != nil {
			t.Fatal(err)
		}
		// 100 bytes announced, 7 sent: far below net/http's 256 KiB that
		// it reads after the handler.
		fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n{\"code\"", route.method, route.path)
		// Not a time bound: the answer is due after --body-timeout 1s, and
		// this deadline only ends a test that would otherwise never end.
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Errorf("%s %s with a stalled body: no answer: %v", route.method, route.path, err)
			c.Close()
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != route.want || !resp.Close {
			t.Errorf("%s %s with a stalled body: %d (Connection: close %v), want %d saying the connection closes", route.method, route.path, resp.StatusCode, resp.Close, route.want)
		}
		if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
			t.Errorf("%s %s: after the %d the connection reads %v, want EOF (closed by the server)", route.method, route.path, resp.StatusCode, err)
		}
		c.Close()
	}
}

// A PUT refused halfway, past --max-body (a chunked body, which has no
// length to refuse it by before it is read) or on a stalled body, opened
// the target, truncated it and wrote what came before the refusal: the
// file the session had was lost. The bytes go aside and replace the
// target only once whole.
func TestAttackFailedPutTruncatesFile(t *testing.T) {
	s := startServer(t, "--pool", "0", "--max-body", "64K", "--body-timeout", "1s")
	id := s.session(api.SessionRequest{}).SessionID
	target := "/v1/sessions/" + id + "/files/keep.txt"
	const original = "the session's own file\n"
	if code, body := s.call("PUT", target, []byte(original), nil); code != 201 {
		t.Fatalf("PUT: %d %s", code, body)
	}
	// 413: a chunked body of 128 KiB against --max-body 64K.
	req, _ := http.NewRequest("PUT", "http://stockade"+target, io.MultiReader(bytes.NewReader(bytes.Repeat([]byte("x"), 128<<10))))
	req.ContentLength = -1
	if resp, err := s.hc.Do(req); err != nil {
		t.Errorf("chunked PUT over --max-body: %v", err)
	} else {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 413 {
			t.Errorf("chunked PUT over --max-body: %d, want 413", resp.StatusCode)
		}
	}
	// 408: 1000 bytes announced, 9 sent, then a stall.
	c, err := net.Dial("unix", s.sock)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "PUT %s HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\noverwrit-", target)
	c.SetReadDeadline(time.Now().Add(30 * time.Second)) // ends a hung test, bounds nothing
	if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != 408 {
		t.Errorf("stalled PUT: %v %v, want 408", resp, err)
	}
	c.Close()
	if code, body := s.call("GET", target, nil, nil); code != 200 || string(body) != original {
		t.Errorf("after two refused PUTs the file reads %d %q, want %q", code, body, original)
	}
	// Nothing of the refused bodies is left beside it.
	if r := s.cell(id, "import os\nsorted(os.listdir('.'))"); !resultIs(r, "['keep.txt']") {
		t.Errorf("/work after refused PUTs: %+v", r)
	}
	// A whole PUT still replaces the file, keeping its permissions.
	s.cell(id, "import os\nos.chmod('keep.txt', 0o600)")
	if code, body := s.call("PUT", target, []byte("new"), nil); code != 201 {
		t.Fatalf("PUT: %d %s", code, body)
	}
	if r := s.cell(id, "import os\nopen('keep.txt').read(), oct(os.stat('keep.txt').st_mode & 0o777)"); !resultIs(r, "('new', '0o600')") {
		t.Errorf("a whole PUT: %+v", r)
	}
}

// A PUT writes beside its target (.stockade-put-*) and renames into
// place, in a directory the cell shares: a leftover process of the cell
// renamed the temporary file away and planted a symlink under its name,
// so the server's rename put the cell's symlink at the target and the
// answer was 201. The server compares what is at the target with the file
// it wrote, and says the write was raced (409) instead.
func TestAttackPutTempSwappedForSymlink(t *testing.T) {
	s := startServer(t, "--pool", "0")
	id := s.session(api.SessionRequest{}).SessionID
	// The watcher swaps the first temporary file it sees, then says so in
	// swapped.txt, and stops by itself: after one swap, or 120 s.
	watcher := `import os, time
end = time.monotonic() + 120
while time.monotonic() < end:
    names = [n for n in os.listdir('.') if n.startswith('.stockade-put-')]
    if names:
        os.rename(names[0], 'moved')
        os.symlink('/etc/passwd', names[0])
        open('swapped.txt', 'w').write('yes')
        break
    time.sleep(0.001)
`
	r := s.cell(id, "import subprocess\nopen('/tmp/w.py', 'w').write("+strconv.Quote(watcher)+")\nsubprocess.Popen(['python3', '/tmp/w.py']).pid")
	if r.Verdict != api.ExecOK || r.Result == nil {
		t.Fatalf("the watcher: %+v", r)
	}
	// The body: a first part (the temporary file exists from then on),
	// the rest once the watcher has swapped it, so the rename comes after.
	pr, pw := io.Pipe()
	go func() {
		pw.Write(bytes.Repeat([]byte("a"), 4096))
		for range 1200 { // a guard against a hung test (120 s), not a bound asserted
			resp, err := s.hc.Get("http://stockade/v1/sessions/" + id + "/files/swapped.txt")
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 {
					break
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		pw.Write([]byte("the rest\n"))
		pw.Close()
	}()
	req, _ := http.NewRequest("PUT", "http://stockade/v1/sessions/"+id+"/files/target.txt", pr)
	resp, err := s.hc.Do(req)
	if err != nil {
		t.Fatalf("PUT: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	r = s.cell(id, "import os\nos.path.exists('swapped.txt'), os.path.islink('target.txt')")
	if !resultIs(r, "(True, True)") {
		t.Fatalf("the swap did not happen (the test proves nothing): %+v", r)
	}
	if resp.StatusCode == 201 || resp.StatusCode != 409 || !bytes.Contains(body, []byte("replaced")) {
		t.Errorf("PUT whose target became the cell's symlink: %d %s, want 409 naming the race", resp.StatusCode, body)
	}
	// Without a watcher, a PUT is done as before.
	if code, body := s.call("PUT", "/v1/sessions/"+id+"/files/other.txt", []byte("x"), nil); code != 201 {
		t.Errorf("a plain PUT: %d %s", code, body)
	}
}

// open_files 10 or 11 passed validation (its minimum was 3), but the
// jail's init applies the limit to itself and then opens descriptors of
// its own: the jail could not start, and the caller got a 500 naming
// inotify. Below the minimum is the caller's error, naming the field; at
// the minimum a run and a session start and run a cell.
func TestAttackOpenFilesTooFewForInit(t *testing.T) {
	s := startServer(t, "--pool", "0")
	for _, n := range []int{10, 11} {
		limits := api.Limits{"open_files": n}
		code, _, body := s.post(api.RunRequest{Code: code("print(1)"), Limits: limits})
		if code/100 != 4 || !strings.Contains(string(body), string(profiles.FieldOpenFiles)) {
			t.Errorf("/v1/run with open_files %d: %d %s, want a 4xx naming %s", n, code, body, profiles.FieldOpenFiles)
		}
		code2, body2 := s.call("POST", "/v1/sessions", api.SessionRequest{Limits: limits}, nil)
		if code2/100 != 4 || !strings.Contains(string(body2), string(profiles.FieldOpenFiles)) {
			t.Errorf("/v1/sessions with open_files %d: %d %s, want a 4xx naming %s", n, code2, body2, profiles.FieldOpenFiles)
		}
	}
	limits := api.Limits{"open_files": profiles.MinOpenFiles}
	if r := s.run(api.RunRequest{Code: code("print(1)"), Limits: limits}); r.Verdict != "ok" || r.Stdout != "1\n" {
		t.Errorf("/v1/run at open_files %d: %+v", profiles.MinOpenFiles, r)
	}
	code, body := s.call("POST", "/v1/sessions", api.SessionRequest{Limits: limits}, nil)
	var c api.SessionCreated
	if code != 201 || json.Unmarshal(body, &c) != nil {
		t.Fatalf("/v1/sessions at open_files %d: %d %s\n%s", profiles.MinOpenFiles, code, body, s.logString())
	}
	if r := s.cell(c.SessionID, "6 * 7"); !resultIs(r, "42") {
		t.Errorf("a cell in a session at open_files %d: %+v", profiles.MinOpenFiles, r)
	}
}

// holdConns opens n connections that the server accepted (each answered
// GET /v1/health with 200) and keeps them open. A connection refused
// while fewer are held is tried again: one the test's client closed just
// before counts until the server has read its end.
func holdConns(t *testing.T, s *testServer, n int) []net.Conn {
	t.Helper()
	s.hc.CloseIdleConnections()
	var held []net.Conn
	t.Cleanup(func() {
		for _, c := range held {
			c.Close()
		}
	})
	for deadline := time.Now().Add(30 * time.Second); len(held) < n; {
		c, err := net.Dial("unix", s.sock)
		if err != nil {
			t.Fatal(err)
		}
		switch code := getOn(t, c, bufio.NewReader(c)); {
		case code == 200:
			held = append(held, c)
			continue
		case code != 503 || time.Now().After(deadline):
			t.Fatalf("GET /v1/health with %d connections held: %d", len(held), code)
		}
		c.Close()
		time.Sleep(50 * time.Millisecond)
	}
	return held
}

// --max-conns caps the connections open at once from all callers; only
// the per-caller cap had a test. One uid under its per-caller cap holds
// --max-conns 3 connections, and a fourth is refused naming the total
// cap.
func TestAttackConnectionsPastMaxConns(t *testing.T) {
	s := startServer(t, "--pool", "0", "--max-conns", "3", "--max-conns-per-caller", "100")
	holdConns(t, s, 3)
	c, err := net.Dial("unix", s.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The refusal comes without a request too (after answerWait); the
	// deadline only ends a test that would hang.
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("a fourth connection past --max-conns 3: %v, want a 503", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(string(body), "(--max-conns)") {
		t.Errorf("a fourth connection past --max-conns 3: %d %s, want 503 naming --max-conns", resp.StatusCode, body)
	}
}

// A session's body takes its share of --body-budget before it is read (a
// stalled one holds its share while it waits), and a chunked body, whose
// size nothing says, is charged --max-body: otherwise callers sending
// slow or chunked bodies to the session routes would make the server
// hold bodies past its budget. While one such body is being read, the
// budget has no room for another.
func TestAttackSessionBodiesOutsideBudget(t *testing.T) {
	s := startServer(t, "--pool", "0", "--max-body", "1M", "--body-budget", "1M", "--queue-wait", "1s", "--body-timeout", "60s")
	id := s.session(api.SessionRequest{}).SessionID
	exec := "/v1/sessions/" + id + "/exec"
	for _, head := range []string{
		"Content-Length: 1048576\r\n\r\n{\"code\": \"",
		"Transfer-Encoding: chunked\r\n\r\na\r\n{\"code\": \"\r\n",
	} {
		c, err := net.Dial("unix", s.sock)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%s", exec, head)
		// Once the stalled body holds its share, a small one waits and is
		// refused naming the budget.
		var last string
		eventually(t, fmt.Sprintf("a body refused while a stalled one (%q) is read", strings.SplitN(head, "\r\n", 2)[0]), func() bool {
			code, body := s.call("POST", exec, api.ExecRequest{Code: code("1")}, nil)
			last = fmt.Sprintf("%d %s", code, body)
			return code == 503 && strings.Contains(string(body), "--body-budget")
		})
		if t.Failed() {
			t.Logf("last answer: %s", last)
		}
		c.Close()
		eventually(t, "the budget given back when the stalled caller left", func() bool {
			code, _ := s.call("POST", exec, api.ExecRequest{Code: code("1")}, nil)
			return code == 200
		})
	}
}
