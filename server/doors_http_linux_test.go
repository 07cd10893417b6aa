package server

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// A caller sends the head of a request and a few bytes of a small body,
// then stalls. The handler's body deadline ran out and it wrote its 408,
// but net/http reads what is left of a small unread body before it
// answers, to keep the connection, with no deadline: the 408 never came
// and the connection (a goroutine, a place under --max-conns) was held
// for ever. Each route that reads a body answers and closes.
func TestAttackStalledSmallBodyHoldsConnection(t *testing.T) {
	s := startServer(t, "--pool", "0", "--body-timeout", "1s")
	id := s.session(SessionRequest{}).SessionID
	for _, route := range []struct{ method, path string }{
		{"POST", "/v1/run"},
		{"POST", "/v1/sessions"},
		{"POST", "/v1/sessions/" + id + "/exec"},
		{"PUT", "/v1/sessions/" + id + "/files/stalled.txt"},
		{"POST", "/v1/mcp"},
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
		if resp.StatusCode != 408 {
			t.Errorf("%s %s with a stalled body: %d, want 408", route.method, route.path, resp.StatusCode)
		}
		if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
			t.Errorf("%s %s: after the 408 the connection reads %v, want EOF (closed by the server)", route.method, route.path, err)
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
	id := s.session(SessionRequest{}).SessionID
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
