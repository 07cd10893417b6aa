package server

import (
	"bufio"
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
