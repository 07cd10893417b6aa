package netproxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// fixture is a proxy whose checks run on the real rules and classes, with
// one substitution: every checked address is dialled at a loopback test
// server instead (the jail tests dial for real, in network namespaces).
type fixture struct {
	proxy  *Proxy
	addr   string // the proxy's listener
	log    *Log
	dialed []string
	mu     sync.Mutex
	tls    *httptest.Server
	plain  *httptest.Server
	notice bytes.Buffer
}

var testNames = map[string][]string{
	"example.com":       {"203.0.113.10"},
	"plain.example":     {"203.0.113.11"},
	"loop.example":      {"127.0.0.1"},
	"meta.example":      {"169.254.169.254"},
	"ten.example":       {"10.0.0.5"},
	"six.example":       {"::1"},
	"mapped.example":    {"::ffff:127.0.0.1"},
	"mixed.example":     {"203.0.113.12", "192.168.0.1"},
	"other.example.com": {"203.0.113.13"},
}

func newFixture(t *testing.T, cfg Config, rules ...string) *fixture {
	t.Helper()
	f := &fixture{}
	big := bytes.Repeat([]byte("x"), 8<<20)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			w.Write(big)
		case "/upload":
			n, _ := io.Copy(io.Discard, r.Body)
			fmt.Fprintf(w, "got %d", n)
		default:
			fmt.Fprintf(w, "hello from %s %s", r.Host, r.URL.Path)
		}
	})
	f.tls = httptest.NewTLSServer(h)
	f.plain = httptest.NewServer(h)
	t.Cleanup(f.tls.Close)
	t.Cleanup(f.plain.Close)
	rs, err := ParseRules(rules)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Rules = rs
	// The test names resolve to documentation addresses, private unless
	// opened like an internal mirror would be.
	cfg.Addrs.AllowPrivate = append(cfg.Addrs.AllowPrivate, netip.MustParsePrefix("203.0.113.0/24"))
	f.log = NewLog(&f.notice, false)
	cfg.Log = f.log
	if cfg.Resolve == nil {
		cfg.Resolve = func(_ context.Context, name string) ([]netip.Addr, error) {
			var out []netip.Addr
			for _, s := range testNames[name] {
				out = append(out, netip.MustParseAddr(s))
			}
			if out == nil {
				return nil, fmt.Errorf("no such host %s", name)
			}
			return out, nil
		}
	}
	cfg.DialContext = func(ctx context.Context, network, address string) (net.Conn, error) {
		f.mu.Lock()
		f.dialed = append(f.dialed, address)
		f.mu.Unlock()
		target := f.tls.Listener.Addr().String()
		if strings.HasPrefix(address, "127.0.0.1:") {
			target = address // the upstream proxy of TestProxyHonoursUpstreamProxy
		} else if strings.HasSuffix(address, ":80") {
			target = f.plain.Listener.Addr().String()
		}
		var d net.Dialer
		return d.DialContext(ctx, network, target)
	}
	f.proxy = New(cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = ln.Addr().String()
	f.proxy.Serve(ln)
	t.Cleanup(f.proxy.Close)
	return f
}

func (f *fixture) client() *http.Client {
	pool := f.tls.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	u, _ := url.Parse("http://" + f.addr)
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		Proxy:           http.ProxyURL(u),
		TLSClientConfig: &tls.Config{RootCAs: pool},
	}}
}

func (f *fixture) decisions() []Decision {
	f.proxy.Close()
	return f.log.Decisions()
}

func TestProxyAllowsListedNameAndDialsTheCheckedAddress(t *testing.T) {
	f := newFixture(t, Config{}, "example.com", "plain.example:80")
	resp, err := f.client().Get("https://example.com/x")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "hello from example.com /x" {
		t.Fatalf("body %q", body)
	}
	resp, err = f.client().Get("http://plain.example/y?z=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "hello from plain.example /y" {
		t.Fatalf("plain body %q", body)
	}
	ds := f.decisions()
	if len(ds) == 2 && ds[0].Via == "GET" {
		ds[0], ds[1] = ds[1], ds[0] // the kept-alive tunnel is logged when it closes
	}
	if len(ds) != 2 || !ds[0].Allowed || ds[0].Address != "203.0.113.10:443" || ds[0].Via != "CONNECT" ||
		ds[0].BytesUp == 0 || ds[0].BytesDown == 0 || ds[1].Via != "GET" || ds[1].Address != "203.0.113.11:80" {
		t.Fatalf("decisions %+v", ds)
	}
	if f.dialed[0] != "203.0.113.10:443" {
		t.Fatalf("dialled %v, want the checked address", f.dialed)
	}
	if f.notice.Len() != 0 {
		t.Fatalf("notices for allowed traffic: %s", f.notice.String())
	}
}

// connect sends a raw CONNECT and returns the status line.
func connect(t *testing.T, addr, target string) (string, net.Conn) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("CONNECT %q: %v", target, err)
	}
	return strings.TrimSpace(line), c
}

func TestAttackProxyRefusals(t *testing.T) {
	f := newFixture(t, Config{}, "example.com", "loop.example", "meta.example", "ten.example",
		"six.example", "mapped.example", "mixed.example", "203.0.113.0/24:8443")
	for _, tc := range []struct {
		target, reason string
	}{
		{"loop.example:443", "loopback"},
		{"meta.example:443", "cloud metadata"},
		{"ten.example:443", "RFC 1918"},
		{"six.example:443", "loopback"},
		{"mapped.example:443", "mapped"},
		{"mixed.example:443", "192.168.0.1"},
		{"203.0.113.10:443", "port 443 is not allowed for 203.0.113.10"},
		{"198.51.100.10:443", "IP address not in the allowlist"},
		{"169.254.169.254:80", "not in the allowlist"},
		{"example.com:8443", "port 8443 is not allowed"},
		{"example.com:80", "port 80 is not allowed"},
		{"unlisted.example:443", "not in the allowlist"},
		{"exa\x00mple.com:443", "invalid host name"},
		{"example.com%00.evil:443", "invalid host name"},
		{"user@example.com:443", "invalid host name"},
		{"[::1]:443", "IP address not in the allowlist"},
		{"[2001:db8::1]:443", "IP address not in the allowlist"},
		{"[::ffff:127.0.0.1]:443", "IP address not in the allowlist"},
		{"[fe80::1%25lo]:443", "zone"},
		{"example.com", "HOST:PORT"},
	} {
		line, c := connect(t, f.addr, tc.target)
		c.Close()
		if !strings.HasPrefix(line, "HTTP/1.1 4") || !strings.Contains(line, tc.reason) {
			t.Errorf("CONNECT %q: %q, want a refusal saying %q", tc.target, line, tc.reason)
		}
	}
	ds := f.decisions()
	for _, d := range ds {
		if d.Allowed {
			t.Errorf("allowed: %+v", d)
		}
	}
	if len(f.dialed) != 0 {
		t.Errorf("dialled %v for refused targets", f.dialed)
	}
	if n := strings.Count(f.notice.String(), "stockade: network: refused CONNECT"); n != len(ds) {
		t.Errorf("%d notices for %d refusals:\n%s", n, len(ds), f.notice.String())
	}
}

func TestAttackProxyCIDRRuleStillHoldsClasses(t *testing.T) {
	f := newFixture(t, Config{}, "0.0.0.0/0", "[::/0]:443")
	for _, target := range []string{"127.0.0.1:443", "169.254.169.254:443", "10.1.1.1:443", "[::1]:443", "[::ffff:127.0.0.1]:443"} {
		line, c := connect(t, f.addr, target)
		c.Close()
		if !strings.HasPrefix(line, "HTTP/1.1 403") {
			t.Errorf("CONNECT %s through 0.0.0.0/0: %q", target, line)
		}
	}
}

func TestAttackProxySNIMismatch(t *testing.T) {
	f := newFixture(t, Config{}, "example.com")
	line, c := connect(t, f.addr, "example.com:443")
	if !strings.HasPrefix(line, "HTTP/1.1 200") {
		t.Fatal(line)
	}
	// Blank line after the status, then the hello names another server
	// (domain fronting through an allowed name).
	tc := tls.Client(&skipHead{Conn: c}, &tls.Config{ServerName: "other.example.com", InsecureSkipVerify: true})
	if err := tc.Handshake(); err == nil {
		t.Fatal("handshake through a tunnel whose SNI differs from the CONNECT target succeeded")
	}
	ds := f.decisions()
	if len(ds) != 1 || ds[0].Allowed || !strings.Contains(ds[0].Reason, "differs") {
		t.Fatalf("decisions %+v", ds)
	}
}

func TestAttackProxyPlainBytesInTunnel(t *testing.T) {
	f := newFixture(t, Config{}, "example.com")
	line, c := connect(t, f.addr, "example.com:443")
	if !strings.HasPrefix(line, "HTTP/1.1 200") {
		t.Fatal(line)
	}
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	rest, _ := io.ReadAll(c)
	if strings.Contains(string(rest), "hello") {
		t.Fatalf("plain HTTP crossed a CONNECT tunnel: %q", rest)
	}
	ds := f.decisions()
	if len(ds) != 1 || ds[0].Allowed || !strings.Contains(ds[0].Reason, "TLS") {
		t.Fatalf("decisions %+v", ds)
	}
}

// skipHead drops the rest of the proxy's response head (the blank line).
type skipHead struct {
	net.Conn
	done bool
}

func (s *skipHead) Read(p []byte) (int, error) {
	if !s.done {
		s.done = true
		var b [2]byte
		if _, err := io.ReadFull(s.Conn, b[:]); err != nil {
			return 0, err
		}
	}
	return s.Conn.Read(p)
}

func TestProxyDownloadLimitCutsTheFlood(t *testing.T) {
	f := newFixture(t, Config{MaxDownload: 1 << 20}, "example.com")
	resp, err := f.client().Get("https://example.com/big")
	if err == nil {
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if n >= 8<<20 {
			t.Fatalf("read %d bytes through a 1 MiB limit", n)
		}
	}
	if _, err := f.client().Get("https://example.com/x"); err == nil {
		t.Fatal("a new tunnel opened after the download limit was used up")
	}
	ds := f.decisions()
	var cut, refused bool
	var down int64
	for _, d := range ds {
		down += d.BytesDown
		cut = cut || strings.Contains(d.Cut, "download limit")
		refused = refused || (!d.Allowed && strings.Contains(d.Reason, "download limit"))
	}
	if !cut || !refused || down > 1<<20 {
		t.Fatalf("cut %v refused %v down %d: %+v", cut, refused, down, ds)
	}
	if !strings.Contains(f.notice.String(), "cut CONNECT example.com:443: download limit") {
		t.Fatalf("notices: %s", f.notice.String())
	}
}

func TestProxyUploadLimitCutsTheFlood(t *testing.T) {
	f := newFixture(t, Config{MaxUpload: 256 << 10}, "example.com")
	_, err := f.client().Post("https://example.com/upload", "application/octet-stream", bytes.NewReader(make([]byte, 4<<20)))
	if err == nil {
		t.Fatal("4 MiB upload went through a 256 KiB limit")
	}
	ds := f.decisions()
	if len(ds) == 0 || ds[0].BytesUp > 256<<10 || !strings.Contains(ds[0].Cut, "upload limit") {
		t.Fatalf("decisions %+v", ds)
	}
}

func TestProxyTunnelLimit(t *testing.T) {
	f := newFixture(t, Config{MaxTunnels: 2}, "example.com")
	var held []net.Conn
	for i := 0; i < 2; i++ {
		line, c := connect(t, f.addr, "example.com:443")
		if !strings.HasPrefix(line, "HTTP/1.1 200") {
			t.Fatal(line)
		}
		held = append(held, c)
	}
	line, c := connect(t, f.addr, "example.com:443")
	c.Close()
	if !strings.HasPrefix(line, "HTTP/1.1 503") || !strings.Contains(line, "tunnel limit") {
		t.Fatalf("third tunnel: %q", line)
	}
	for _, c := range held {
		c.Close()
	}
}

func TestProxyHonoursUpstreamProxy(t *testing.T) {
	// The upstream proxy sees a CONNECT to the checked address, never the
	// name, and the credentials stockade was given.
	var mu sync.Mutex
	var seen []string
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	var target string
	go func() {
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				mu.Lock()
				seen = append(seen, req.Method+" "+req.Host+" "+req.Header.Get("Proxy-Authorization"))
				mu.Unlock()
				s, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer s.Close()
				io.WriteString(c, "HTTP/1.1 200 OK\r\n\r\n")
				go io.Copy(s, br)
				io.Copy(c, s)
			}()
		}
	}()
	u, _ := url.Parse("http://corp:secret@" + up.Addr().String())
	f := newFixture(t, Config{Upstream: u}, "example.com")
	target = f.tls.Listener.Addr().String()
	resp, err := f.client().Get("https://example.com/z")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0] != "CONNECT 203.0.113.10:443 Basic Y29ycDpzZWNyZXQ=" {
		t.Fatalf("upstream proxy saw %q", seen)
	}
}

// rawHead sends head as the jail wrote it and returns the status line and
// the rest of what came back before the connection closed or went quiet.
func rawHead(t *testing.T, addr, head string) (string, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	// The proxy closes every plain-HTTP connection after its one answer,
	// so this waits only on a machine that slow.
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil {
		t.Fatalf("%q: %v", head, err)
	}
	if strings.HasPrefix(head, "CONNECT ") && strings.Contains(line, " 200 ") {
		return strings.TrimSpace(line), "" // the tunnel waits for a ClientHello
	}
	rest, _ := io.ReadAll(br)
	return strings.TrimSpace(line), string(rest)
}

// TestAttackProxyHostHeaderDiffersFromTarget: the jail's Host header names
// another server than its CONNECT target or absolute-form URL (a proxy
// that checked one and dialled the other, or passed the jail's Host on to
// an origin that serves several names, would reach it). The proxy decides
// on the target and dials only what it checked: an allowed target with
// the Host of a refused one opens to the allowed one's address, a refused
// target with an allowed Host is refused, and a plain-HTTP origin sees the
// checked host as its one Host.
func TestAttackProxyHostHeaderDiffersFromTarget(t *testing.T) {
	f := newFixture(t, Config{}, "example.com", "meta.example", "plain.example:80", "meta.example:80", "loop.example:80")
	for _, tc := range []struct {
		head   string
		status string // the status line's start
		body   string // in what came back, for plain HTTP
	}{
		{"CONNECT example.com:443 HTTP/1.1\r\nHost: meta.example:443\r\n\r\n", "HTTP/1.1 200 ", ""},
		{"CONNECT example.com:443 HTTP/1.1\r\nHost: 169.254.169.254:443\r\nHost: loop.example\r\n\r\n", "HTTP/1.1 200 ", ""},
		{"CONNECT meta.example:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", "HTTP/1.1 403 stockade: meta.example resolves to 169.254.169.254: cloud metadata", ""},
		{"CONNECT 169.254.169.254:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", "HTTP/1.1 403 stockade: IP address not in the allowlist", ""},
		{"GET http://plain.example/p HTTP/1.1\r\nHost: meta.example\r\n\r\n", "HTTP/1.1 200 ", "hello from plain.example /p"},
		{"GET http://plain.example/q HTTP/1.1\r\nhost: loop.example\r\nHOST: 169.254.169.254\r\n\r\n", "HTTP/1.1 200 ", "hello from plain.example /q"},
		{"GET http://meta.example/ HTTP/1.1\r\nHost: plain.example\r\n\r\n", "HTTP/1.1 403 stockade: meta.example resolves to 169.254.169.254: cloud metadata", ""},
		{"GET http://loop.example/ HTTP/1.1\r\nHost: plain.example\r\n\r\n", "HTTP/1.1 403 stockade: loop.example resolves to 127.0.0.1: loopback", ""},
	} {
		line, rest := rawHead(t, f.addr, tc.head)
		if !strings.HasPrefix(line, tc.status) || !strings.Contains(rest, tc.body) {
			t.Errorf("%q: %q %.200q, want %q with %q", tc.head, line, rest, tc.status, tc.body)
		}
	}
	ds := f.decisions()
	f.mu.Lock()
	defer f.mu.Unlock()
	want := []string{"203.0.113.10:443", "203.0.113.10:443", "203.0.113.11:80", "203.0.113.11:80"}
	if fmt.Sprint(f.dialed) != fmt.Sprint(want) {
		t.Errorf("dialled %v, want only the targets' checked addresses %v", f.dialed, want)
	}
	for _, d := range ds {
		if d.Allowed && d.Host != "example.com" && d.Host != "plain.example" {
			t.Errorf("allowed by its Host header: %+v", d)
		}
	}
}
