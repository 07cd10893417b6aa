package netproxy

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestAttackPlainHTTPSmuggledSecondRequest: a :80 rule is documented as
// "absolute-form GET or HEAD, rewritten to origin form with the checked host
// in Host, one request per connection". But after the rewritten head the
// proxy tunnels whatever else the jail sends, unparsed: a pipelined second
// request with any method (POST), any Host (another virtual host on the
// same server or CDN edge) and any body reaches the upstream verbatim. A
// server that ignores "Connection: close" for pipelined requests (or a
// front that splits them) serves it. The upstream here records the bytes.
func TestAttackPlainHTTPSmuggledSecondRequest(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var got bytes.Buffer
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		b, _ := io.ReadAll(c)
		mu.Lock()
		got.Write(b)
		mu.Unlock()
	}()
	rs, err := ParseRules([]string{"plain.example:80"})
	if err != nil {
		t.Fatal(err)
	}
	p := New(Config{
		Rules: rs,
		Addrs: AddrPolicy{AllowPrivate: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}},
		Resolve: func(context.Context, string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("203.0.113.11")}, nil
		},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, ln.Addr().String())
		},
	})
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.Serve(pl)
	defer p.Close()
	c, err := net.Dial("tcp", pl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	smuggled := "POST /admin HTTP/1.1\r\nHost: internal.example\r\nContent-Length: 5\r\n\r\nhello"
	if _, err := io.WriteString(c, "GET http://plain.example/ HTTP/1.1\r\nHost: plain.example\r\n\r\n"+smuggled); err != nil {
		t.Fatal(err)
	}
	<-done
	c.Close()
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(got.String(), "Host: internal.example") || strings.Contains(got.String(), "POST /admin") {
		t.Errorf("the upstream of a :80 rule received a second, unchecked request:\n%q", got.String())
	}
}

// TestAttackPlainHTTPBodyOnGet: a GET that announces a body would leave the
// body for the upstream to read as the next request; it is refused before
// anything is dialled.
func TestAttackPlainHTTPBodyOnGet(t *testing.T) {
	f := newFixture(t, Config{}, "plain.example:80")
	for _, h := range []string{"Content-Length: 5", "Transfer-Encoding: chunked"} {
		c, err := net.Dial("tcp", f.addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(c, "GET http://plain.example/ HTTP/1.1\r\nHost: plain.example\r\n"+h+"\r\n\r\nhello"); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, _ := io.ReadAll(c)
		c.Close()
		if !strings.HasPrefix(string(b), "HTTP/1.1 400 ") {
			t.Errorf("GET with %s: %q", h, b)
		}
	}
}
