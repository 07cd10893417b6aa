package vmtier

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

// sessionNetProfile is the guest server's profile for the session tests:
// the fixture's rules (as newNetFixture's spec has them).
const sessionNetProfile = `extends = "python"
[network]
allow = ["allowed.test:80", "loop.test:80"]
allow_private = ["203.0.113.0/24"]
`

// TestAttackVMSessionRawStreams: a session's guest keeps its network
// channel for the session's life. A guest that writes its own requests
// on it (the "netraw" fault, before its server starts: a guest kernel an
// attacker owns could at any time), for an address and names the rules
// do not list, is refused by the session's host proxy, which never asks
// for them and records the refusals; a listed one works, so the refusals
// are the rules'. When the session's guest is closed nothing of the
// channel is left: no goroutine of yamux or the proxy (the proxy accepts
// nothing more), no socket, no run directory.
func TestAttackVMSessionRawStreams(t *testing.T) {
	o := needVM(t)
	left := watch(&o)
	f := newNetFixture(t)
	targets := []string{"203.0.113.8:80", "other.test:80", "http://203.0.113.8/x", "allowed.test:80"}
	o.fault = "netraw " + strings.Join(targets, ",")
	spec := f.spec(t, "python3")
	if n := channelGoroutines(); n != 0 {
		t.Fatalf("%d goroutines of a network channel before the guest", n)
	}
	var g *Guest
	var err error
	func() {
		ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
		defer cancel()
		if g, err = Boot(ctx, spec, o); err != nil {
			t.Fatalf("boot: %v", err)
		}
	}()
	closed := false
	defer func() {
		if !closed {
			g.Close()
		}
	}()
	if err := g.Serve(ServePlan{Profile: []byte(sessionNetProfile)}); err != nil {
		t.Fatalf("serve: %v", err)
	}
	if len(g.raw) != len(targets) {
		t.Fatalf("the guest's raw requests answered %q", g.raw)
	}
	for i, target := range targets[:3] {
		if want := target + " -> HTTP/1.1 403 stockade: "; !strings.HasPrefix(g.raw[i], want) {
			t.Errorf("%s: %q, want the host's 403", target, g.raw[i])
		}
	}
	if want := "allowed.test:80 -> HTTP/1.1 200 "; !strings.HasPrefix(g.raw[3], want) {
		t.Errorf("%q: want %q", g.raw[3], want)
	}
	if asked := f.Asked(); !slices.Equal(asked, []string{netOrigin}) {
		t.Errorf("the upstream was asked for %q, want only %s", asked, netOrigin)
	}
	refused := 0
	for _, d := range g.Network() {
		if !d.Allowed && (d.Host == "203.0.113.8" || d.Host == "other.test") {
			refused += d.Count
		}
	}
	if refused != 3 {
		t.Errorf("network %+v: want the host's three refusals", g.Network())
	}
	// The session's channel is up while its guest serves.
	if n := channelGoroutines(); n == 0 {
		t.Errorf("no goroutine of the network channel while the session's guest serves")
	}
	if err := g.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	closed = true
	left.check(t)
	// The session's proxy accepts nothing more: handed a listener, it
	// closes it at once.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	g.net.proxy.Serve(ln)
	if c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second); err == nil {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		_, rerr := c.Write([]byte("CONNECT allowed.test:80 HTTP/1.1\r\n\r\n"))
		b := make([]byte, 64)
		n, _ := c.Read(b)
		c.Close()
		if rerr == nil && n > 0 {
			t.Errorf("the ended session's proxy answered %q", b[:n])
		}
	}
	// The proxy's goroutines end with its Close, before Guest.Close
	// returns; yamux's own may take a moment after the session's.
	n := 0
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if n = channelGoroutines(); n == 0 {
			break
		}
	}
	if n != 0 {
		t.Errorf("%d goroutines of the network channel outlived the session's guest", n)
	}
}
