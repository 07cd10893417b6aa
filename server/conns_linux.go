package server

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// connLimiter caps the connections open at once, in all and per caller
// uid. Every open connection costs the server a goroutine and buffers
// whether or not it ever sends a request, and the request caps can only
// count what reaches a handler.
type connLimiter struct {
	net.Listener
	max, perCaller int
	log            func(string, ...any)

	mu       sync.Mutex
	open     int
	byCaller map[uint32]int
	warned   time.Time
}

func newConnLimiter(ln net.Listener, max, perCaller int, log func(string, ...any)) *connLimiter {
	return &connLimiter{Listener: ln, max: max, perCaller: perCaller, log: log, byCaller: map[uint32]int{}}
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
		if why := l.take(p.uid); why != "" {
			l.refuse(c, why)
			continue
		}
		return &limitedConn{Conn: c, l: l, p: p, known: perr == nil}, nil
	}
}

// take counts a connection of uid, or says why it may not open.
func (l *connLimiter) take(uid uint32) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.open >= l.max:
		return "too many connections open (--max-conns)"
	case l.byCaller[uid] >= l.perCaller:
		return "this uid has too many connections open (--max-conns-per-caller)"
	}
	l.open++
	l.byCaller[uid]++
	return ""
}

func (l *connLimiter) put(uid uint32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.byCaller[uid]--; l.byCaller[uid] <= 0 {
		delete(l.byCaller, uid)
	}
}

// refuse tells the caller why before closing: a fresh connection's send
// buffer is empty, and the deadline keeps the accept loop from ever
// waiting on it.
func (l *connLimiter) refuse(c net.Conn, why string) {
	body := marshal(&apiError{Status: 503, Msg: "busy: " + why})
	_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_, _ = c.Write([]byte(fmt.Sprintf(connRefusal, len(body), body)))
	c.Close()
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
	c.once.Do(func() { c.l.put(c.p.uid) })
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
