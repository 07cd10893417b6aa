package server

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// getOn sends GET /v1/health on c, keeping the connection, and reads the
// answer.
func getOn(t *testing.T, c net.Conn, br *bufio.Reader) int {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// A caller that keeps its keep-alive connections open after one request
// each held them for ever (net/http's idle timeout is its read timeout
// when unset, and the server set neither): --max-conns-per-caller of them
// shut the uid out for good. They are closed after --idle-timeout.
func TestAttackIdleKeepAliveConnectionsPinned(t *testing.T) {
	s := startServer(t, "--pool", "0", "--max-conns-per-caller", "4", "--idle-timeout", "1s")
	s.hc.CloseIdleConnections() // the readiness check's connection would count
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	var readers []*bufio.Reader
	for range 4 {
		c, err := net.Dial("unix", s.sock)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		readers = append(readers, bufio.NewReader(c))
		if code := getOn(t, c, readers[len(readers)-1]); code != 200 {
			t.Fatalf("GET /v1/health: %d", code)
		}
	}
	// Pinned: the uid's next connection is refused.
	if code := s.get("/v1/health", nil); code != 503 {
		t.Fatalf("a fifth connection got %d, want 503 past --max-conns-per-caller 4", code)
	}
	s.hc.CloseIdleConnections()
	time.Sleep(2 * time.Second)
	for i, c := range held {
		c.SetReadDeadline(time.Now().Add(time.Second))
		if _, err := readers[i].ReadByte(); !errors.Is(err, io.EOF) {
			t.Errorf("keep-alive connection %d, idle 2s with --idle-timeout 1s: read %v, want EOF (closed by the server)", i, err)
		}
	}
	eventually(t, "served again once the idle connections were closed", func() bool { return s.get("/v1/health", nil) == 200 })
}
