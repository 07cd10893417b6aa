package netproxy

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// helloSNI is the server_name a hand-made ClientHello carries.
type helloSNI struct {
	omit bool   // no server_name extension at all
	kind byte   // NameType: 0 is host_name
	name string // may be empty, an address, or hold any byte
	// more are further host_names after name: in the same list, or with
	// split in a second server_name extension.
	more  []string
	split bool
}

// sniExtension is one server_name extension (RFC 6066) listing entries.
func sniExtension(entries ...[]byte) []byte {
	var list []byte
	for _, e := range entries {
		list = append(list, e...)
	}
	list = append(be16(len(list)), list...)
	ext := append([]byte{0, 0}, be16(len(list))...)
	return append(ext, list...)
}

// sniEntry is one ServerName: its NameType and the name.
func sniEntry(kind byte, name string) []byte {
	return append(append([]byte{kind}, be16(len(name))...), name...)
}

// makeHello builds one TLS record holding a minimal ClientHello, enough
// for the proxy's parser and nothing a real server would accept.
func makeHello(s helloSNI) []byte {
	body := []byte{3, 3}                      // legacy_version TLS 1.2
	body = append(body, make([]byte, 32)...)  // random
	body = append(body, 0)                    // legacy_session_id
	body = append(body, 0, 2, 0x13, 0x01)     // cipher_suites: TLS_AES_128_GCM_SHA256
	body = append(body, 1, 0)                 // legacy_compression_methods: null
	exts := []byte{0x00, 0x0b, 0x00, 2, 1, 0} // ec_point_formats, so extensions are never empty
	if !s.omit {
		entries := [][]byte{sniEntry(s.kind, s.name)}
		var second [][]byte
		for _, m := range s.more {
			if s.split {
				second = append(second, sniEntry(0, m))
			} else {
				entries = append(entries, sniEntry(0, m))
			}
		}
		exts = append(exts, sniExtension(entries...)...)
		if len(second) > 0 {
			exts = append(exts, sniExtension(second...)...)
		}
	}
	body = append(body, be16(len(exts))...)
	body = append(body, exts...)
	hs := append([]byte{1, byte(len(body) >> 16), byte(len(body) >> 8), byte(len(body))}, body...)
	return append([]byte{22, 3, 1, byte(len(hs) >> 8), byte(len(hs))}, hs...)
}

func be16(n int) []byte { return binary.BigEndian.AppendUint16(nil, uint16(n)) }

// sniUpstream stands for every server the proxy dials and records the bytes
// each connection brought: a tunnel refused at its ClientHello brings none.
type sniUpstream struct {
	ln       net.Listener
	mu       sync.Mutex
	accepted int
	got      []int
}

// settled returns the bytes of every connection accepted, once each has
// ended (the proxy closed them all at its Close).
func (up *sniUpstream) settled(t *testing.T) []int {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		up.mu.Lock()
		done := len(up.got) == up.accepted
		got := append([]int(nil), up.got...)
		up.mu.Unlock()
		if done {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("upstream connections still open after the proxy closed: %v", got)
		}
	}
}

func newSNIProxy(t *testing.T) (*Proxy, string, *sniUpstream) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up := &sniUpstream{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up.mu.Lock()
			up.accepted++
			up.mu.Unlock()
			go func() {
				defer c.Close()
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				n, _ := io.Copy(io.Discard, c)
				up.mu.Lock()
				up.got = append(up.got, int(n))
				up.mu.Unlock()
			}()
		}
	}()
	rs, err := ParseRules([]string{"example.com", "203.0.113.7"})
	if err != nil {
		t.Fatal(err)
	}
	p := New(Config{
		Rules: rs,
		Addrs: AddrPolicy{AllowPrivate: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}},
		Resolve: func(context.Context, string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("203.0.113.10")}, nil
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
	t.Cleanup(p.Close)
	return p, pl.Addr().String(), up
}

// sendHello CONNECTs to target, sends hello if the tunnel opens, and
// returns the status line and whether the proxy kept the tunnel open.
func sendHello(t *testing.T, proxy, target string, hello []byte) (string, bool) {
	t.Helper()
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil {
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	line = strings.TrimSpace(line)
	if !strings.Contains(line, " 200 ") {
		return line, false
	}
	if _, err := br.ReadString('\n'); err != nil { // the blank line
		t.Fatal(err)
	}
	if _, err := c.Write(hello); err != nil {
		t.Fatal(err)
	}
	// A refused tunnel is closed at once; an open one waits for the server,
	// which answers nothing for 5 s.
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	_, err = br.ReadByte()
	var ne net.Error
	return line, errors.As(err, &ne) && ne.Timeout()
}

// TestAttackProxySNIWithoutAName: a tunnel to a named host whose
// ClientHello names no server (no server_name extension), an empty one, an
// invalid one (not a DNS name, an address, a byte a name cannot hold), or
// only a name of another type, would let the jail reach whatever else the
// dialled address serves (its default site, another name by Host). Each is
// refused before a byte is forwarded; only the name in the CONNECT passes.
// An IP literal is refused at the CONNECT unless an IP rule lists it; with
// one, a ClientHello that names any server is refused, and one that names
// none, as a TLS client to an address sends, crosses (that is the design:
// README's Network section).
func TestAttackProxySNIWithoutAName(t *testing.T) {
	p, addr, up := newSNIProxy(t)
	for _, tc := range []struct {
		target string
		sni    helloSNI
		want   string // "refused" at the hello, "403" at the CONNECT, "open"
	}{
		{"example.com:443", helloSNI{omit: true}, "refused"},
		{"example.com:443", helloSNI{name: ""}, "refused"},
		{"example.com:443", helloSNI{name: "exa mple.com"}, "refused"},
		{"example.com:443", helloSNI{name: "example.com\x00.evil.example"}, "refused"},
		{"example.com:443", helloSNI{name: "203.0.113.10"}, "refused"},
		{"example.com:443", helloSNI{name: "other.example"}, "refused"},
		{"example.com:443", helloSNI{kind: 1, name: "example.com"}, "refused"},
		{"example.com:443", helloSNI{name: "EXAMPLE.com."}, "open"}, // the same name, normalised
		{"198.51.100.7:443", helloSNI{omit: true}, "403"},
		{"198.51.100.7:443", helloSNI{name: "example.com"}, "403"},
		{"203.0.113.7:443", helloSNI{name: "example.com"}, "refused"},
		{"203.0.113.7:443", helloSNI{name: "203.0.113.7"}, "refused"},
		{"203.0.113.7:443", helloSNI{name: ""}, "refused"},
		{"203.0.113.7:443", helloSNI{omit: true}, "open"},
	} {
		line, open := sendHello(t, addr, tc.target, makeHello(tc.sni))
		got := "refused"
		switch {
		case strings.HasPrefix(line, "HTTP/1.1 403 "):
			got = "403"
		case open:
			got = "open"
		}
		if got != tc.want {
			t.Errorf("CONNECT %s with SNI omitted=%v type=%d name=%q: %s (%s), want %s",
				tc.target, tc.sni.omit, tc.sni.kind, tc.sni.name, got, line, tc.want)
		}
	}
	p.Close()
	got := up.settled(t)
	// The two open tunnels forwarded their hello; the refused ones nothing.
	var forwarded int
	for _, n := range got {
		if n > 0 {
			forwarded++
		}
	}
	if forwarded != 2 {
		t.Errorf("%d tunnels forwarded bytes upstream (%v), want only the 2 open ones", forwarded, got)
	}
	for _, d := range p.cfg.Log.Decisions() {
		if d.Allowed && d.BytesUp > 0 && d.Host != "example.com" && d.Host != "203.0.113.7" {
			t.Errorf("allowed: %+v", d)
		}
	}
}

// TestAttackProxySNIWithTwoNames: a ClientHello that names the allowed
// server and another, in one server_name list or in two server_name
// extensions, shows the proxy one name and the server (which may take the
// first, the last or any) another: CONNECT example.com with SNI [other,
// example.com] opened a tunnel that the server answers as other. Each is
// refused before a byte is forwarded, whichever name comes first, and even
// when both are the allowed name.
func TestAttackProxySNIWithTwoNames(t *testing.T) {
	p, addr, up := newSNIProxy(t)
	for _, tc := range []struct {
		sni  helloSNI
		want string // "refused" at the hello, or "open"
	}{
		{helloSNI{name: "other.example", more: []string{"example.com"}}, "refused"},
		{helloSNI{name: "example.com", more: []string{"other.example"}}, "refused"},
		{helloSNI{name: "example.com", more: []string{"example.com"}}, "refused"},
		{helloSNI{name: "other.example", more: []string{"example.com"}, split: true}, "refused"},
		{helloSNI{name: "example.com", more: []string{"other.example"}, split: true}, "refused"},
		{helloSNI{name: "example.com", more: []string{"example.com"}, split: true}, "refused"},
		{helloSNI{name: "example.com"}, "open"},
	} {
		line, open := sendHello(t, addr, "example.com:443", makeHello(tc.sni))
		got := "refused"
		if open {
			got = "open"
		}
		if !strings.HasPrefix(line, "HTTP/1.1 200 ") || got != tc.want {
			t.Errorf("CONNECT example.com:443 with SNI %q then %q (split %v): %s (%s), want %s",
				tc.sni.name, tc.sni.more, tc.sni.split, got, line, tc.want)
		}
	}
	p.Close()
	forwarded := 0
	for _, n := range up.settled(t) {
		if n > 0 {
			forwarded++
		}
	}
	if forwarded != 1 {
		t.Errorf("%d tunnels forwarded bytes upstream, want only the one open", forwarded)
	}
	two := 0
	for _, d := range p.cfg.Log.Decisions() {
		if !d.Allowed && strings.Contains(d.Reason, "two") {
			two += d.Count
		}
	}
	if two != 6 {
		t.Errorf("%d tunnels refused for naming two servers, want 6: %+v", two, p.cfg.Log.Decisions())
	}
}
