package netproxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
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

// TestAttackProxyConnFlood: a jail opens idle connections to its proxy and
// never sends a head. Each accepted one costs stockade an fd, a goroutine and
// a head buffer outside the jail's cgroup, and the tunnel cap applied only
// after the head (19,734 fds and 140 MB from one jail). The head cap keeps
// stockade's share at headSlots; the rest wait in the kernel's backlog, and
// once the flood ends the proxy serves again.
func TestAttackProxyConnFlood(t *testing.T) {
	f := newFixture(t, Config{MaxTunnels: 2}, "example.com")
	var idle []net.Conn
	for i := 0; i < 100; i++ {
		c, err := net.Dial("tcp", f.addr)
		if err != nil {
			break // the backlog is full: the flood is held in the kernel
		}
		idle = append(idle, c)
	}
	if len(idle) <= headSlots(2) {
		t.Fatalf("only %d connections opened; the flood did not exceed the cap", len(idle))
	}
	time.Sleep(300 * time.Millisecond) // let the accept loop take all it will
	f.proxy.mu.Lock()
	held := len(f.proxy.conns)
	f.proxy.mu.Unlock()
	if held > headSlots(2) {
		t.Errorf("stockade holds %d idle connections; the cap is %d", held, headSlots(2))
	}
	if held == 0 {
		t.Errorf("stockade accepted no connection at all")
	}
	for _, c := range idle {
		c.Close()
	}
	line, c := connect(t, f.addr, "example.com:443")
	c.Close()
	if !strings.Contains(line, " 200 ") {
		t.Fatalf("after the flood: %s", line)
	}
}

// emfileListener fails Accept with EMFILE a few times, as a listener does
// when the process is out of fds.
type emfileListener struct {
	net.Listener
	fails int
}

func (l *emfileListener) Accept() (net.Conn, error) {
	if l.fails > 0 {
		l.fails--
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// TestAttackProxyConnFloodEMFILE: at EMFILE Accept returned and the proxy
// stopped for the rest of the run; it now backs off and keeps serving.
func TestAttackProxyConnFloodEMFILE(t *testing.T) {
	f := newFixture(t, Config{}, "example.com")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.proxy.Serve(&emfileListener{Listener: ln, fails: 5})
	line, c := connect(t, ln.Addr().String(), "example.com:443")
	c.Close()
	if !strings.Contains(line, " 200 ") {
		t.Fatalf("after EMFILE: %s", line)
	}
}

// TestAttackLogFloodHidesMetadataProbe: the decisions log keeps the first
// 256 distinct kinds. A jail that first spends them on junk (256 CONNECTs
// to distinct unlisted names) then probes the metadata service through an
// allowed name that resolves there: the probe is refused, but the result's
// network list shows it only as one of "N more attempts ... not
// itemised", and stderr gets no notice for it. The report an operator
// audits loses exactly the attempt that matters.
func TestAttackLogFloodHidesMetadataProbe(t *testing.T) {
	f := newFixture(t, Config{}, "meta.example")
	floodThenProbeMetadata(t, f, maxDecisions, func(i int) string { return fmt.Sprintf("junk%d.invalid:443", i) },
		func(d Decision) bool { return d.Host == "meta.example" }, "meta.example")
}

// floodThenProbeMetadata makes n CONNECTs to flood(i), then probes the
// metadata service through meta.example: the probe must be refused, still
// have an entry of its own in the network list (itemised finds it), and
// still be noticed on stderr (a notice holding noticed).
func floodThenProbeMetadata(t *testing.T, f *fixture, n int, flood func(i int) string, itemised func(Decision) bool, noticed string) {
	t.Helper()
	for i := 0; i < n; i++ {
		_, c := connect(t, f.addr, flood(i))
		c.Close()
	}
	line, c := connect(t, f.addr, "meta.example:443")
	c.Close()
	if !strings.Contains(line, " 403 ") {
		t.Fatalf("metadata probe: %s", line)
	}
	seen := false
	for _, d := range f.decisions() {
		seen = seen || itemised(d)
	}
	if !seen || !strings.Contains(f.notice.String(), noticed) {
		t.Errorf("the refused metadata probe is not itemised in the network list nor noticed on stderr:\n%s", f.notice.String())
	}
}

// TestAttackLogFloodOfLoopbackHidesMetadataProbe: the never-reachable
// bucket has its own bound; past it each class still gets an entry and a
// notice, so loopback junk cannot hide a metadata probe either.
func TestAttackLogFloodOfLoopbackHidesMetadataProbe(t *testing.T) {
	f := newFixture(t, Config{}, "meta.example", "127.0.0.0/8")
	floodThenProbeMetadata(t, f, maxDecisions+10, func(i int) string { return fmt.Sprintf("127.0.%d.%d:443", i/250, i%250+1) },
		func(d Decision) bool { return strings.Contains(d.Reason, "cloud metadata") }, "cloud metadata")
}

// TestAttackHeadErrorsCarryNoClientPort: every head that timed out was a
// distinct kind ("read tcp 127.0.0.1:3128->127.0.0.1:54774: i/o timeout"),
// so idle connections alone filled the log and stderr.
func TestAttackHeadErrorsCarryNoClientPort(t *testing.T) {
	a := headError(&net.OpError{Op: "read", Net: "tcp", Source: &net.TCPAddr{Port: 54774}, Err: os.ErrDeadlineExceeded})
	b := headError(&net.OpError{Op: "read", Net: "tcp", Source: &net.TCPAddr{Port: 54788}, Err: os.ErrDeadlineExceeded})
	if a != b || strings.Contains(a, "54774") {
		t.Errorf("head errors differ by client port: %q, %q", a, b)
	}
	c := headError(&net.OpError{Op: "read", Net: "tcp", Source: &net.TCPAddr{Port: 54774}, Err: syscall.ECONNRESET})
	if strings.Contains(c, "54774") {
		t.Errorf("head error names the client port: %q", c)
	}
}

// TestAttackProxy502HidesUpstreamProxy: when stockade's own upstream proxy
// failed, the 502 the jail got named it ("upstream proxy
// http://corp:xxxxx@10.1.2.3:3128 refused CONNECT ..."): its address and
// user name, which the jail must never see. The run's report keeps them.
func TestAttackProxy502HidesUpstreamProxy(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()
	refusing, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer refusing.Close()
	go func() {
		for {
			c, err := refusing.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				buf := make([]byte, 4096)
				_, _ = c.Read(buf)
				io.WriteString(c, "HTTP/1.1 407 Proxy Authentication Required (corp-proxy.internal)\r\nContent-Length: 0\r\n\r\n")
			}()
		}
	}()
	for _, hostport := range []string{closedAddr, refusing.Addr().String()} {
		u, _ := url.Parse("http://corpuser:s3cret@" + hostport)
		f := newFixture(t, Config{Upstream: u}, "example.com")
		line, c := connect(t, f.addr, "example.com:443")
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		rest, _ := io.ReadAll(c)
		c.Close()
		got := line + "\n" + string(rest)
		if !strings.HasPrefix(line, "HTTP/1.1 502 ") {
			t.Errorf("through %s: %q, want a 502", hostport, line)
		}
		_, port, _ := net.SplitHostPort(hostport)
		for _, secret := range []string{"corpuser", "s3cret", "xxxxx", hostport, port, "corp-proxy", "407"} {
			if strings.Contains(got, secret) {
				t.Errorf("the jail was shown %q of the upstream proxy:\n%s", secret, got)
			}
		}
		ds := f.decisions()
		if len(ds) != 1 || !strings.Contains(ds[0].Error, hostport) {
			t.Errorf("the report lost the upstream failure: %+v", ds)
		}
	}
}

// TestAttackLogFloodHidesAllowedTunnel: once 256 refused kinds filled the
// report, an allowed tunnel that carried data had no entry at all, its
// bytes only counted in "N more attempts". Allowed traffic is never
// dropped from the report.
func TestAttackLogFloodHidesAllowedTunnel(t *testing.T) {
	f := newFixture(t, Config{}, "example.com")
	for i := 0; i < maxDecisions+5; i++ {
		_, c := connect(t, f.addr, fmt.Sprintf("junk%d.invalid:443", i))
		c.Close()
	}
	resp, err := f.client().Get("https://example.com/big")
	if err != nil {
		t.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	var down int64
	for _, d := range f.decisions() {
		if d.Allowed && d.Host == "example.com" {
			down += d.BytesDown
		}
	}
	if down < n {
		t.Errorf("the report shows %d bytes of an allowed tunnel that carried %d", down, n)
	}
}

// TestLogKeepsEveryAllowedByte: past its own bucket, allowed traffic is
// summed per rule instead of dropped, so the report accounts for every
// byte that crossed.
func TestLogKeepsEveryAllowedByte(t *testing.T) {
	l := NewLog(nil, false)
	var want int64
	for i := 0; i < 3*maxDecisions; i++ {
		l.Add(Decision{Host: fmt.Sprintf("h%d.example.com", i), Port: 443, Via: "CONNECT", Allowed: true,
			Rule: "*.example.com", BytesUp: 10, BytesDown: int64(i)})
		l.Add(Decision{Host: fmt.Sprintf("junk%d.invalid", i), Port: 443, Via: "CONNECT", Reason: "not in the allowlist"})
		want += int64(i)
	}
	var got int64
	var count int
	entries := l.Decisions()
	for _, d := range entries {
		if d.Allowed {
			got += d.BytesDown
			count += d.Count
		}
	}
	if got != want || count != 3*maxDecisions {
		t.Errorf("allowed entries hold %d bytes in %d attempts, want %d in %d", got, count, want, 3*maxDecisions)
	}
	if len(entries) > 3*maxDecisions+2 {
		t.Errorf("%d entries: the report is not bounded", len(entries))
	}
}

// TestAttackProxyUploadCapStopsLookups: after the upload limit was reached,
// new CONNECTs under a wildcard rule still made the proxy resolve names the
// jail chose, so the names carried data past the cap (DNS exfiltration).
// The caps are checked before resolving, and the bytes of the names looked
// up count against the upload limit.
func TestAttackProxyUploadCapStopsLookups(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	resolve := func(_ context.Context, name string) ([]netip.Addr, error) {
		mu.Lock()
		asked = append(asked, name)
		mu.Unlock()
		return []netip.Addr{netip.MustParseAddr("203.0.113.10")}, nil
	}
	// Names alone: 200 bytes hold four 42-byte names.
	f := newFixture(t, Config{MaxUpload: 200, Resolve: resolve}, "*.example.com")
	var statuses []string
	for i := 0; i < 10; i++ {
		line, c := connect(t, f.addr, fmt.Sprintf("%030d.example.com:443", i))
		c.Close()
		statuses = append(statuses, strings.Fields(line)[1])
	}
	mu.Lock()
	var named int
	for _, n := range asked {
		named += len(n)
	}
	if named > 200 || len(asked) != 4 {
		t.Errorf("looked up %d names (%d bytes) under a 200-byte upload limit: %v", len(asked), named, asked)
	}
	asked = nil
	mu.Unlock()
	if strings.Join(statuses, " ") != "200 200 200 200 403 403 403 403 403 403" {
		t.Errorf("statuses %v", statuses)
	}

	// Data first: once a tunnel spent the limit, no name is looked up.
	f = newFixture(t, Config{MaxUpload: 256 << 10, Resolve: resolve}, "*.example.com")
	_, _ = f.client().Post("https://up.example.com/upload", "application/octet-stream", bytes.NewReader(make([]byte, 1<<20)))
	mu.Lock()
	asked = nil
	mu.Unlock()
	line, c := connect(t, f.addr, "exfiltrate-this-secret.example.com:443")
	c.Close()
	if !strings.Contains(line, " 403 ") || !strings.Contains(line, "upload limit") {
		t.Errorf("after the upload limit: %q", line)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 0 {
		t.Errorf("looked up %v after the upload limit was reached", asked)
	}
}

// TestAttackPlainHTTPBareCRAndObsFold: a plain-HTTP request head with a
// bare CR or an obs-fold line was forwarded verbatim, so the origin (or a
// front before it) could read a header the proxy never saw ("X: a\rHost:
// internal"). RFC 9112 lets a server refuse both; the proxy does, before
// dialling.
func TestAttackPlainHTTPBareCRAndObsFold(t *testing.T) {
	f := newFixture(t, Config{}, "plain.example:80")
	for _, head := range []string{
		"GET http://plain.example/ HTTP/1.1\r\nHost: plain.example\r\nX-A: a\rHost: internal.example\r\n\r\n",
		"GET http://plain.example/ HTTP/1.1\r\nHost: plain.example\r\nX-A: a\r\r\n\r\n",
		"GET http://plain.example/ HTTP/1.1\r\nHost: plain.example\r\nX-A: a\r\n Host: internal.example\r\n\r\n",
		"GET http://plain.example/ HTTP/1.1\r\nHost: plain.example\r\nX-A: a\r\n\tHost: internal.example\r\n\r\n",
		"GET http://plain.example/ HTTP/1.1\r\nHost: plain.example\r\nno colon here\r\n\r\n",
		"GET http://plain.example/ HTTP/1.1\r\nHost: plain.example\r\nX-A : a\r\n\r\n",
		"GET http://plain.example/ HTTP/1.1\r\nHost: plain.example\r\nX-A: a\x00b\r\n\r\n",
		"GET http://plain.example/x\rHost:internal.example HTTP/1.1\r\nHost: plain.example\r\n\r\n",
		"GET http://plain.example/ HTTP/1.1\r\r\nHost: plain.example\r\n\r\n",
	} {
		c, err := net.Dial("tcp", f.addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(c, head); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, _ := io.ReadAll(c)
		c.Close()
		if !strings.HasPrefix(string(b), "HTTP/1.1 400 ") {
			t.Errorf("%q: %q, want 400", head, b)
		}
	}
	f.decisions()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.dialed) != 0 {
		t.Errorf("dialled %v for malformed heads", f.dialed)
	}
}
