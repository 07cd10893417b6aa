package server

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A connection over --max-conns-per-caller is answered 503 and closed. A
// unix socket closed with the peer's request unread resets the peer: an
// HTTP client that wrote its request after the server's close failed with
// EPIPE, and one whose request was unread read ECONNRESET after the 503,
// so callers saw a reset where they should have read why (CI had to count
// a reset as the refusal). And an answer that came before the request
// failed Go's client ("Unsolicited response received on idle HTTP
// channel"). A client that sends its request at once reads the refusal
// whole and then EOF; one that reads first gets the refusal all the same
// (after answerWait), and its request written then is taken, not reset;
// and Go's client gets its 503 every time.
func TestRefusedConnectionIsNotReset(t *testing.T) {
	s := startServer(t, "--pool", "0", "--max-conns-per-caller", "1")
	s.hc.CloseIdleConnections() // the readiness check's connection would count
	var held net.Conn
	for deadline := time.Now().Add(30 * time.Second); held == nil; time.Sleep(50 * time.Millisecond) {
		c, err := net.Dial("unix", s.sock)
		if err != nil {
			t.Fatal(err)
		}
		// The readiness check's connection counts until the server has
		// read its close.
		if code := getOn(t, c, bufio.NewReader(c)); code == 200 {
			held = c
		} else if c.Close(); time.Now().After(deadline) {
			t.Fatalf("GET /v1/health on the only connection: %d for 30s", code)
		}
	}
	defer held.Close()
	// A request larger than the first read the server waits for, so that
	// the rest is there to drain.
	body := strings.Repeat(" ", 4096)
	request := fmt.Sprintf("POST /v1/run HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	for i, requestFirst := range []bool{true, true, true, false, false} {
		c, err := net.Dial("unix", s.sock)
		if err != nil {
			t.Fatal(err)
		}
		// The deadline only ends a test that would hang.
		c.SetDeadline(time.Now().Add(30 * time.Second))
		if requestFirst {
			if _, err := io.WriteString(c, request); err != nil {
				t.Fatalf("connection %d over the cap: write its request: %v", i, err)
			}
		}
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("connection %d over the cap (request sent first: %v): %v, want a 503", i, requestFirst, err)
		}
		answer, err := io.ReadAll(resp.Body)
		if resp.StatusCode != 503 || err != nil || !strings.Contains(string(answer), "this uid has too many connections open (--max-conns-per-caller)") {
			t.Fatalf("connection %d over the cap: %d %q %v, want 503 saying why", i, resp.StatusCode, answer, err)
		}
		if !requestFirst {
			// A client that sends its request only now, after the answer.
			if _, err := io.WriteString(c, request); err != nil {
				t.Errorf("connection %d: writing the request after the refusal: %v, want it taken (the server lingers)", i, err)
			}
		}
		if n, err := br.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
			t.Errorf("connection %d (request sent first: %v): after the refusal read %d bytes, %v; want EOF, not a reset", i, requestFirst, n, err)
		}
		c.Close()
	}
	// Go's client, whose request races the answer when the server answers
	// at once: it failed about one in fifty here.
	failed := map[string]int{}
	for range 200 {
		resp, err := s.hc.Get("http://stockade/v1/health")
		if err != nil {
			failed[err.Error()]++
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != 503 {
			failed[resp.Status]++
		}
	}
	if len(failed) > 0 {
		t.Errorf("Go's client over the cap, 200 GETs: %v, want 503 every time", failed)
	}
}

// limiterOn serves l's accepted connections by holding them; it returns
// the listener's socket.
func limiterOn(t *testing.T, perCaller int) (*connLimiter, string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	l := newConnLimiter(ln, 0, perCaller, t.Logf)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	return l, sock
}

// One uid opens connections past its cap and holds them without sending
// a byte: each refused one that lingers costs a goroutine until its peer
// closes or the linger time is up. At most maxLingering linger at once; the
// rest are closed at once after their 503.
func TestAttackRefusedConnectionsHoldGoroutines(t *testing.T) {
	l, sock := limiterOn(t, 1)
	l.linger = time.Minute // longer than the test: only the cap ends a linger here
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		return c
	}
	dial() // the one the cap allows
	base := runtime.NumGoroutine()
	const n = 3 * maxLingering
	closedAtOnce := 0
	for i := range n {
		c := dial()
		// A request, as a client sends: an idle one would wait answerWait
		// for its answer. One past the lingering ones may have been
		// answered and closed before it is written (EPIPE).
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		// The deadline only ends a test that would hang.
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 503 {
			t.Fatalf("connection %d over the cap: %v, want a 503", i, err)
		}
		io.Copy(io.Discard, resp.Body)
	}
	// Both kinds read EOF after the answer; but a connection the server
	// closed fails our write with EPIPE, and a lingering one takes it.
	for _, c := range conns[1:] {
		if _, err := c.Write([]byte("x")); errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
			closedAtOnce++
		}
	}
	extra := runtime.NumGoroutine() - base
	t.Logf("%d refused connections: %d closed at once, %d more goroutines", n, closedAtOnce, extra)
	if extra > maxLingering+8 {
		t.Errorf("%d refused connections held open by their peers cost %d goroutines; want at most %d (maxLingering) and a few", n, extra, maxLingering)
	}
	if closedAtOnce < n-maxLingering {
		t.Errorf("%d of %d refused connections were closed at once; want at least %d (all past the %d lingering)", closedAtOnce, n, n-maxLingering, maxLingering)
	}
}

// A refused peer that keeps sending is read for at most lingerBytes, then
// closed: lingering never reads without end.
func TestAttackRefusedConnectionDrainsWithoutEnd(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	wrote := make(chan error, 1)
	go func() {
		chunk := make([]byte, 64<<10)
		for {
			if _, err := c.Write(chunk); err != nil {
				wrote <- err
				return
			}
		}
	}()
	drained := make(chan int64, 1)
	go func() { drained <- lingerClose(sc, []byte("refused\n"), time.Minute, time.Minute, lingerBytes) }()
	// The timer only ends a test that would hang; the linger time (a
	// minute) is not what is tested.
	select {
	case n := <-drained:
		if n > lingerBytes {
			t.Errorf("lingering dropped %d bytes; want at most %d", n, lingerBytes)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("a peer sending without end kept the refused connection draining for 30s (the bound is %d bytes)", lingerBytes)
	}
	if err := <-wrote; !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("the peer's write after the close: %v, want EPIPE or ECONNRESET", err)
	}
}
