package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/stockade/stockade/server/internal/capacity"
	"golang.org/x/sys/unix"

	"github.com/stockade/stockade/api"
)

// connLimiter caps the connections open at once, in all and per caller
// uid. Every open connection costs the server a goroutine and buffers
// whether or not it ever sends a request, and the request caps can only
// count what reaches a handler.
type connLimiter struct {
	net.Listener
	open *capacity.Quota // --max-conns, --max-conns-per-caller
	log  func(string, ...any)

	// lingering holds a place for each refused connection being drained
	// (lingerClose); a refusal finding none free closes at once.
	lingering chan struct{}
	linger    time.Duration // lingerTime; a test's may differ

	mu     sync.Mutex
	warned time.Time
}

// A refused connection is answered once its request has begun to arrive,
// or after answerWait without one, and then drained until lingerTime from
// its accept, and for at most lingerBytes; by at most maxLingering
// goroutines at once (each reading through one of io.Discard's pooled
// 8 KiB buffers): a flood of refused connections costs the server no more
// than that, whatever the peers send or hold open. Past maxLingering a
// refused connection is answered and closed at once.
const (
	maxLingering = 64
	answerWait   = time.Second
	lingerTime   = 2 * time.Second
	lingerBytes  = 64 << 10
)

func newConnLimiter(ln net.Listener, max, perCaller int, log func(string, ...any)) *connLimiter {
	return &connLimiter{Listener: ln, open: capacity.NewQuota(max, perCaller), log: log,
		lingering: make(chan struct{}, maxLingering), linger: lingerTime}
}

// refusal is what a connection over the caps reads before it is closed.
const connRefusal = "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Type: application/json\r\nRetry-After: 1\r\nContent-Length: %d\r\n\r\n%s"

func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		p, perr := peerOf(c)
		if perr != nil {
			// No SO_PEERCRED: the handlers refuse it; it still counts in all.
			p = peer{uid: ^uint32(0)}
		}
		if why := l.take(p.owner()); why != "" {
			l.refuse(c, why)
			continue
		}
		return &limitedConn{Conn: c, l: l, p: p, known: perr == nil}, nil
	}
}

// take counts a connection of uid, or says why it may not open.
func (l *connLimiter) take(uid capacity.Owner) string {
	switch l.open.Take(uid) {
	case capacity.ErrQuotaFull:
		return "too many connections open (--max-conns)"
	case capacity.ErrUIDQuotaFull:
		return "this uid has too many connections open (--max-conns-per-caller)"
	}
	return ""
}

func (l *connLimiter) put(uid capacity.Owner) { l.open.Put(uid) }

// refuse tells the caller why before closing, off the accept loop
// (lingerClose), or at once when maxLingering refusals are lingering
// already: a fresh connection's send buffer is empty, and the deadline
// keeps the accept loop from ever waiting on it.
func (l *connLimiter) refuse(c net.Conn, why string) {
	body := marshal(&api.Error{Status: 503, Msg: "busy: " + why})
	answer := []byte(fmt.Sprintf(connRefusal, len(body), body))
	select {
	case l.lingering <- struct{}{}:
		go func() {
			defer func() { <-l.lingering }()
			lingerClose(c, answer, answerWait, l.linger, lingerBytes)
		}()
	default:
		_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		_, _ = c.Write(answer)
		c.Close() // as many lingering as we allow: this one may see a reset
	}
	l.mu.Lock()
	quiet := time.Since(l.warned) < 10*time.Second
	if !quiet {
		l.warned = time.Now()
	}
	l.mu.Unlock()
	if !quiet {
		l.log("refused a connection: %s", why)
	}
}

// lingerClose answers a refused connection and closes it without
// resetting its peer. The answer waits for the request's first bytes (or
// its EOF, or wait): an HTTP client that reads an answer before it has
// sent its request takes it for a stray and fails the request (Go's:
// "Unsolicited response received on idle HTTP channel"). Then the write
// side is shut down, so that the peer reads the answer and EOF, and what
// the peer sends is read and dropped until its EOF, for at most max from
// the start and bytes in all, before the close: a socket closed with data
// unread resets the peer (a unix socket's peer reads ECONNRESET after the
// answer; its write after the close fails with EPIPE, and an HTTP client
// that had not sent its whole request reports that instead of the 503).
// It returns how many bytes it dropped.
func lingerClose(c net.Conn, answer []byte, wait, max time.Duration, bytes int64) int64 {
	defer c.Close()
	end := time.Now().Add(max)
	var first [64]byte
	_ = c.SetReadDeadline(time.Now().Add(min(wait, max)))
	n, _ := c.Read(first[:])
	_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := c.Write(answer); err != nil {
		return int64(n)
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = c.SetReadDeadline(end)
	m, _ := io.Copy(io.Discard, io.LimitReader(c, bytes-int64(n)))
	return int64(n) + m
}

// limitedConn gives its place back once, however often it is closed.
type limitedConn struct {
	net.Conn
	l     *connLimiter
	p     peer
	known bool
	once  sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.put(c.p.owner()) })
	return err
}

// peerOfConn is the caller of a connection the limiter accepted.
func peerOfConn(c net.Conn) (peer, error) {
	if lc, ok := c.(*limitedConn); ok {
		if !lc.known {
			return peer{}, errors.New("no SO_PEERCRED on this connection")
		}
		return lc.p, nil
	}
	return peerOf(c)
}

// errCallerGone is the cause of a run cancelled because its caller closed
// the connection.
var errCallerGone = errors.New("the caller closed its connection")

// watchHangup calls gone once the caller has closed c for good, and stop
// ends the watch. net/http takes a read of EOF for the caller gone and
// cancels the request's context; but on a stream socket that EOF is the
// caller's shutdown(SHUT_WR) as well, by which some clients say that their
// request is whole while they wait for the answer. The kernel tells the
// two apart: a peer's close (or SHUT_RDWR) shuts down both directions of
// our end of a unix socket, and poll reports POLLHUP only then; a
// half-close sets only RCV_SHUTDOWN (POLLRDHUP). The watch polls a
// duplicate of the connection's descriptor through the runtime's poller,
// so it waits without a thread and without contending with net/http's
// own reads for the connection's read lock; it wakes on each change of
// the socket's state and looks for POLLHUP or POLLERR.
func watchHangup(c net.Conn, gone func()) (stop func(), err error) {
	if lc, ok := c.(*limitedConn); ok {
		c = lc.Conn
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil, fmt.Errorf("watch for hangup: %T has no descriptor", c)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("watch for hangup: %w", err)
	}
	dup := -1
	var derr error
	if err := raw.Control(func(fd uintptr) { dup, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil || derr != nil {
		return nil, fmt.Errorf("watch for hangup: dup: %w", errors.Join(err, derr))
	}
	// Non-blocking, as the original: os.NewFile registers it with the
	// poller.
	f := os.NewFile(uintptr(dup), "caller connection")
	fraw, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("watch for hangup: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := fraw.Read(func(fd uintptr) bool {
			// No events asked for: POLLHUP and POLLERR are always reported.
			p := []unix.PollFd{{Fd: int32(fd)}}
			n, err := unix.Poll(p, 0)
			return err == nil && n > 0 && p[0].Revents&(unix.POLLHUP|unix.POLLERR) != 0
		})
		if err == nil {
			gone()
		}
	}()
	return func() {
		f.Close() // wakes the read with ErrFileClosing
		<-done
	}, nil
}

// connKey is the context key of a request's connection.
type connKey struct{}

// runContext is the context of a request from the moment its body is
// read: cancelled when the server kills the runs (its --grace ran out) or
// when the caller closes its connection, but not by the EOF of a
// half-close, which cancels r.Context(). stop releases it.
func (s *Server) runContext(r *http.Request) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(r.Context()))
	stopKill := context.AfterFunc(s.runs, func() { cancel(context.Cause(s.runs)) })
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	stopWatch, err := func() {}, error(nil)
	if c == nil {
		// In process (ServeTenant): no connection, no half-close.
		stopReq := context.AfterFunc(r.Context(), func() { cancel(errCallerGone) })
		stopWatch = func() { stopReq() }
	} else if stopWatch, err = watchHangup(c, func() { cancel(errCallerGone) }); err != nil {
		// Fail towards cancelling: net/http's watch, half-close and all.
		s.logf("%v: a half-close will cancel this run", err)
		stopReq := context.AfterFunc(r.Context(), func() { cancel(errCallerGone) })
		stopWatch = func() { stopReq() }
	}
	return ctx, func() {
		stopWatch()
		stopKill()
		cancel(nil)
	}
}
