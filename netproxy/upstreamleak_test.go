package netproxy

import (
	"io"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestAttackUpstreamCredentialsReachTheJail: when stockade's own upstream
// proxy cannot be reached, the refusal the jail reads (status line and
// body) and the decision the result reports named the upstream by its
// URL, user name included: the jail's code learnt who stockade logs in to
// its proxy as. Neither may carry any of the upstream's credentials.
func TestAttackUpstreamCredentialsReachTheJail(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close() // nothing listens there: the dial is refused
	u, _ := url.Parse("http://corpuser:corppass@" + closed)
	f := newFixture(t, Config{Upstream: u}, "example.com")
	line, c := connect(t, f.addr, "example.com:443")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	rest, _ := io.ReadAll(c)
	c.Close()
	seen := line + "\n" + string(rest)
	for _, d := range f.decisions() {
		seen += "\n" + d.Reason + "\n" + d.Error
	}
	if !strings.HasPrefix(line, "HTTP/1.1 502") {
		t.Fatalf("CONNECT through an unreachable upstream: %q", line)
	}
	if strings.Contains(seen, "corpuser") || strings.Contains(seen, "corppass") {
		t.Errorf("the jail and the result see the upstream's credentials:\n%s", seen)
	}
}
