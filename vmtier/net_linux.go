package vmtier

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/stockade/stockade/internal/loopback"
	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/netproxy"
	"golang.org/x/sys/unix"
)

// The network channel: with an allowlist, the guest's third serial port
// (ttyS2; a second socket of QEMU's on the host side) carries the guest
// proxy's connections, each a yamux stream the guest opens. The guest's
// jail runs its own proxy with the Spec's rules, relaying what they allow
// to a forwarder on the guest's loopback, which opens the stream; on the
// host a second proxy with the same rules serves the streams and is the
// one that resolves, checks and dials. The guest is not trusted: the
// host's proxy decides as if no proxy stood before it.
const (
	guestNetChannel = "/dev/ttyS2"
	// netStreams bounds the streams the host keeps for a guest at once
	// (beyond, the channel is not read until one ends); the proxy's own
	// head and tunnel caps apply within it.
	netStreams = 128
	// netBacklog bounds the streams opened but not yet accepted: beyond,
	// yamux resets them.
	netBacklog = 16
	// netWindow is each stream's receive window: what the guest can make
	// the host buffer per stream.
	netWindow = 256 << 10
	// netWriteTimeout is how long a frame may wait to be written to the
	// channel before yamux fails the stream's write: a serial port under
	// emulation drains at tens of KiB/s, and the socket's buffer ahead of
	// a frame takes seconds to pass (at 10 s, yamux's default, a 1 MiB
	// download was cut after 256 KiB). It is also how long a stream one
	// side closed waits for the other's close before yamux resets it: the
	// reset overtakes what the other side has received and not yet read
	// (at 10 s, the last 88 bytes of a 320 KiB download were lost). The
	// run's own end closes all.
	netWriteTimeout = 2 * time.Minute
)

// netArgs are QEMU's arguments for the network channel, none without an
// allowlist.
func netArgs(dir string, spec jail.Spec) []string {
	if !spec.Network.Enabled() {
		return nil
	}
	return []string{"-chardev", "socket,id=net,path=" + filepath.Join(dir, "net") + ",server=on,wait=off", "-serial", "chardev:net"}
}

// muxConfig is yamux's configuration for either end: bounded backlog and
// window, no keepalives (the run's own deadlines end it), no log (what a
// guest makes yamux log is not the host's to print).
func muxConfig() *yamux.Config {
	return &yamux.Config{
		AcceptBacklog:          netBacklog,
		KeepAliveInterval:      time.Minute,
		ConnectionWriteTimeout: netWriteTimeout,
		MaxStreamWindowSize:    netWindow,
		StreamOpenTimeout:      30 * time.Second,
		StreamCloseTimeout:     netWriteTimeout,
		LogOutput:              io.Discard,
	}
}

// hostNet is the host's side of one run's network channel.
type hostNet struct {
	log   *netproxy.Log
	proxy *netproxy.Proxy
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
}

// startHostNet builds the host's proxy from the Spec (its rules, the
// host's upstream and hosts file) and connects to the channel's socket
// once QEMU made it; nil without an allowlist.
func startHostNet(dir string, spec jail.Spec, exited <-chan struct{}) (*hostNet, error) {
	if !spec.Network.Enabled() {
		return nil, nil
	}
	h := &hostNet{log: netproxy.NewLog(nil, false), stop: make(chan struct{}), done: make(chan struct{})}
	cfg, err := jail.ProxyConfig(spec.Network, spec.Host, h.log)
	if err != nil {
		return nil, setupErr("isolation vm: network: %w", err)
	}
	h.proxy = netproxy.New(cfg)
	sock := filepath.Join(dir, "net")
	go func() {
		defer close(h.done)
		var c net.Conn
		for {
			var err error
			if c, err = net.Dial("unix", sock); err == nil {
				break
			}
			select {
			case <-exited:
				return
			case <-h.stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
		g := &muxGuard{Conn: c}
		sess, err := yamux.Server(g, muxConfig())
		if err != nil {
			c.Close()
			return
		}
		g.sess.Store(sess)
		// Serve returns at once, closing the session, if the proxy was
		// closed meanwhile; Close closes it otherwise.
		h.proxy.Serve(&streamListener{sess})
	}()
	return h, nil
}

// errGuestPing: the guest sent a yamux ping, which ours never do.
var errGuestPing = errors.New("network channel: the guest sent a ping")

// muxGuard reads the guest's side of the channel frame by frame, before
// yamux does:
//   - A ping ends the session: yamux answers each from a goroutine of its
//     own, which waits for the channel for up to its write timeout, so a
//     guest that sent pings and read nothing would make the host hold a
//     goroutine per ping. The guest's yamux never pings (keepalives off).
//   - A stream's opening (SYN) waits while the session holds netStreams
//     streams: yamux keeps every stream until both sides closed it (or
//     its close timeout), so a guest that opened streams and never closed
//     its side would grow the host's table at the channel's speed. The
//     wait stalls the whole channel, which only the guest itself uses.
type muxGuard struct {
	net.Conn
	sess atomic.Pointer[yamux.Session]
	hdr  [12]byte // yamux's header: version, type, flags, stream, length
	have int
	skip uint32 // the payload of a data frame still to pass
}

// waitForRoom waits until the session holds fewer than netStreams streams
// (or is closed).
func (g *muxGuard) waitForRoom() error {
	for {
		s := g.sess.Load()
		if s == nil || s.NumStreams() < netStreams {
			return nil
		}
		if s.IsClosed() {
			return yamux.ErrSessionShutdown
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (g *muxGuard) Read(b []byte) (int, error) {
	n, err := g.Conn.Read(b)
	for i := 0; i < n; {
		if g.skip > 0 {
			k := min(g.skip, uint32(n-i))
			g.skip -= k
			i += int(k)
			continue
		}
		g.hdr[g.have] = b[i]
		g.have++
		i++
		if g.have < len(g.hdr) {
			continue
		}
		g.have = 0
		switch g.hdr[1] {
		case 0: // data: its payload follows
			g.skip = binary.BigEndian.Uint32(g.hdr[8:])
		case 2:
			return 0, errGuestPing
		}
		if g.hdr[1] <= 1 && g.hdr[3]&1 != 0 { // data or window update, with SYN
			if err := g.waitForRoom(); err != nil {
				return 0, err
			}
		}
	}
	return n, err
}

// close ends the channel: the session, every stream and every tunnel the
// host's proxy holds.
func (h *hostNet) close() {
	if h == nil {
		return
	}
	h.once.Do(func() {
		close(h.stop)
		<-h.done
		h.proxy.Close()
	})
}

// reply ends the channel and puts the host's decisions into the reply's result.
func (h *hostNet) reply(rep *Reply) *Reply {
	if rep == nil || rep.Result == nil {
		return rep
	}
	if h == nil {
		// No channel: whatever the guest says it was allowed is a tale.
		rep.Result.Network = MergeNetwork(nil, rep.Result.Network)
		return rep
	}
	h.close()
	rep.Result.Network = MergeNetwork(h.log.Decisions(), rep.Result.Network)
	return rep
}

// MergeNetwork merges the host's decisions into the guest's list: the
// host's proxy saw every request the guest's relayed and decided it
// again, so its entries are the result's; the guest's entries for the
// same host, port and way are dropped. What the guest refused itself (or
// saw as a direct attempt) never reached the host and stays as the guest
// reported it. What the guest says it was allowed and the host has no
// entry for is dropped: every allowed connection of a guest's goes
// through the host's proxy, so such an entry is the guest's word alone
// (a guest kernel's invention: a connection nobody made, or bytes).
func MergeNetwork(host, guest []jail.NetworkDecision) []jail.NetworkDecision {
	seen := map[string]bool{}
	key := func(d jail.NetworkDecision) string {
		return fmt.Sprintf("%s\x00%d\x00%s", d.Host, d.Port, d.Via)
	}
	for _, d := range host {
		seen[key(d)] = true
	}
	out := append([]jail.NetworkDecision{}, host...)
	for _, d := range guest {
		if !seen[key(d)] && !d.Allowed {
			out = append(out, d)
		}
	}
	return out
}

// streamListener is the session as the proxy's listener.
type streamListener struct{ s *yamux.Session }

func (l *streamListener) Accept() (net.Conn, error) { return l.s.Accept() }

func (l *streamListener) Close() error   { return l.s.Close() }
func (l *streamListener) Addr() net.Addr { return l.s.Addr() }

// guestNet brings the guest's side of the channel up for spec, when it has
// an allowlist: the loopback, the channel as a yamux client, and a
// forwarder on 127.0.0.1 that the guest's jail gets as its deciding
// upstream. stop closes them.
func guestNet(spec *jail.Spec, fault string) (stop func(), raw []string, err error) {
	if !spec.Network.Enabled() {
		return func() {}, nil, nil
	}
	if err := loopback.Up(); err != nil {
		return nil, nil, fmt.Errorf("guest network: loopback: %w", err)
	}
	c, err := os.OpenFile(guestNetChannel, os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("guest network: channel %s: %w", guestNetChannel, err)
	}
	if err := makeRaw(int(c.Fd())); err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("guest network: channel %s: raw mode: %w", guestNetChannel, err)
	}
	sess, err := yamux.Client(newTTYConn(c), muxConfig())
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("guest network: %w", err)
	}
	if targets, ok := strings.CutPrefix(fault, "netraw "); ok {
		raw = rawRequests(sess, strings.Split(targets, ","))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		sess.Close()
		return nil, nil, fmt.Errorf("guest network: forwarder: %w", err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			lc, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				forward(lc, sess)
			}()
		}
	}()
	spec.Host.UpstreamProxy = "http://" + ln.Addr().String()
	spec.Host.UpstreamDecides = true
	return func() {
		ln.Close()
		sess.Close()
		wg.Wait()
	}, raw, nil
}

// ttyConn is the channel's serial port as yamux's connection. A read
// blocked on a tty is not interrupted by closing it, and yamux's Close
// waits for its reader: reads come through a pipe that Close does end.
type ttyConn struct {
	f  *os.File
	pr *io.PipeReader
}

func newTTYConn(f *os.File) *ttyConn {
	pr, pw := io.Pipe()
	go func() {
		_, err := io.Copy(pw, f)
		pw.CloseWithError(err)
	}()
	return &ttyConn{f: f, pr: pr}
}

func (c *ttyConn) Read(b []byte) (int, error)  { return c.pr.Read(b) }
func (c *ttyConn) Write(b []byte) (int, error) { return c.f.Write(b) }

// Close ends the reads; the port itself stays open until the guest
// powers off (its reader holds it).
func (c *ttyConn) Close() error { return c.pr.Close() }

// forward carries one of the guest proxy's connections over a stream.
func forward(lc net.Conn, sess *yamux.Session) {
	defer lc.Close()
	st, err := sess.Open()
	if err != nil {
		return
	}
	defer st.Close()
	done := make(chan struct{})
	go func() {
		io.Copy(st, lc)
		st.Close() // yamux: a half-close (FIN)
		close(done)
	}()
	io.Copy(lc, st)
	if tc, ok := lc.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	<-done
}

// rawRequests is the "netraw" fault: the guest writes requests on streams
// of its own, past its proxy, as a guest whose kernel is not its own
// would; each answer's status line comes back for the test to see.
func rawRequests(sess *yamux.Session, targets []string) []string {
	var out []string
	for _, t := range targets {
		line := "CONNECT " + t + " HTTP/1.1\r\nHost: " + t + "\r\n\r\n"
		if strings.HasPrefix(t, "http://") {
			line = "GET " + t + " HTTP/1.1\r\nHost: " + strings.TrimPrefix(t, "http://") + "\r\n\r\n"
		}
		out = append(out, t+" -> "+rawOne(sess, line))
	}
	return out
}

func rawOne(sess *yamux.Session, req string) string {
	st, err := sess.Open()
	if err != nil {
		return "open: " + err.Error()
	}
	defer st.Close()
	_ = st.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(st, req); err != nil {
		return "write: " + err.Error()
	}
	l, err := bufio.NewReader(st).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "read: " + err.Error()
	}
	return strings.TrimSpace(l)
}

// netFault runs the "netraw" fault's requests instead of the payload.
func netFault(spec jail.Spec, raw []string) Reply {
	res := jail.FailedResult(spec, errors.New("fault netraw: the payload was not run"))
	res.Stdout = strings.Join(raw, "\n") + "\n"
	return Reply{Result: res}
}
