package netproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Defaults for a Config's zero limits.
const (
	DefaultMaxTunnels  = 32
	DefaultMaxUpload   = 256 << 20 // bytes from the jail, per run
	DefaultMaxDownload = 4 << 30   // bytes to the jail, per run
	// headTimeout bounds how long a connection may hold one of the few
	// head slots before saying what it wants.
	headTimeout = 10 * time.Second
	dialTimeout = 15 * time.Second
	maxHead     = 16 << 10
)

// Config is one run's proxy: what it allows and how it reaches out.
type Config struct {
	Rules Rules
	Addrs AddrPolicy
	// MaxTunnels bounds the connections served at once; MaxUpload and
	// MaxDownload the bytes each way over the whole run. Zero: the default.
	MaxTunnels  int
	MaxUpload   int64
	MaxDownload int64
	// Upstream is stockade's own proxy (its HTTPS_PROXY), through which
	// every allowed connection is tunnelled; nil dials directly. The jail
	// never sees its address or credentials.
	Upstream *url.URL
	// Resolve returns the addresses of a normalised name; nil uses the
	// host's resolver. Whatever it returns is checked like any lookup.
	Resolve func(ctx context.Context, name string) ([]netip.Addr, error)
	// DialContext opens the upstream connection to a checked address (or
	// to Upstream); nil uses net.Dialer. Tests substitute it.
	DialContext func(ctx context.Context, network, address string) (net.Conn, error)
	// Relay says Upstream is a stockade proxy with the same rules that
	// decides again (the VM tier's host side, for the proxy in its
	// guest): what the rules allow goes to it as the jail asked, the name
	// unresolved (CONNECT NAME:PORT, or the absolute-form request), and
	// it resolves, checks the addresses, dials and answers.
	Relay bool
	Log   *Log
}

// Proxy serves one run's listeners. Close ends every connection.
type Proxy struct {
	cfg     Config
	resolve func(ctx context.Context, name string) ([]netip.Addr, error)

	up, down atomic.Int64 // bytes over the run

	// heads bounds the connections accepted but not yet past their head:
	// before the tunnel cap applies, each costs stockade (outside the
	// jail's cgroup) an fd, a goroutine and a head buffer. Beyond it the
	// jail's connections wait in the kernel's listen backlog.
	heads chan struct{}

	mu        sync.Mutex
	active    int
	conns     map[net.Conn]struct{}
	listeners []net.Listener
	closed    bool
	wg        sync.WaitGroup
	ctx       context.Context
	cancel    context.CancelFunc
}

// New returns a proxy for cfg with the zero limits defaulted.
func New(cfg Config) *Proxy {
	if cfg.MaxTunnels <= 0 {
		cfg.MaxTunnels = DefaultMaxTunnels
	}
	if cfg.MaxUpload <= 0 {
		cfg.MaxUpload = DefaultMaxUpload
	}
	if cfg.MaxDownload <= 0 {
		cfg.MaxDownload = DefaultMaxDownload
	}
	if cfg.Log == nil {
		cfg.Log = NewLog(nil, false)
	}
	cfg.Log.mu.Lock()
	cfg.Log.addrs = cfg.Addrs
	cfg.Log.mu.Unlock()
	p := &Proxy{cfg: cfg, conns: map[net.Conn]struct{}{}, heads: make(chan struct{}, headSlots(cfg.MaxTunnels))}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.resolve = cfg.Resolve
	if p.resolve == nil {
		p.resolve = lookupAbsolute
	}
	return p
}

// lookupAbsolute resolves exactly name on the host, never a search-list
// expansion of it. Without the trailing dot the host's `search` and
// `ndots` apply (Kubernetes puts ndots:5 and three search domains in every
// pod): allowed.test was asked as allowed.test.corp.test first, and the
// proxy dialled whatever that zone's owner chose. Go's own resolver, not
// libc's: it reads the same resolv.conf and hosts file, and matches an
// absolute name against the hosts file, which glibc does not ("getent
// ahosts localhost." finds nothing).
func lookupAbsolute(ctx context.Context, name string) ([]netip.Addr, error) {
	r := &net.Resolver{PreferGo: true}
	addrs, err := r.LookupNetIP(ctx, "ip", name+".")
	for i, a := range addrs {
		// An IPv4 address from the hosts file comes back IPv4-mapped
		// (::ffff:a.b.c.d), which the classes refuse; the IPv4 address is
		// what a dial reaches, so it is what gets checked.
		addrs[i] = a.Unmap()
	}
	return addrs, err
}

// Serve accepts on ln until Close. It returns at once if the proxy is
// already closed.
func (p *Proxy) Serve(ln net.Listener) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		ln.Close()
		return
	}
	p.listeners = append(p.listeners, ln)
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		backoff := time.Duration(0)
		for {
			select {
			case p.heads <- struct{}{}:
			case <-p.ctx.Done():
				return
			}
			c, err := ln.Accept()
			if err != nil {
				<-p.heads
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					continue
				}
				// Out of fds (the jail's flood, or the host's): the
				// listener is fine and the fds come back as connections
				// end. Returning would stop the proxy for the rest of the
				// run.
				if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
					errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM) {
					backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
					select {
					case <-time.After(backoff):
						continue
					case <-p.ctx.Done():
						return
					}
				}
				return
			}
			backoff = 0
			if !p.track(c) {
				<-p.heads
				c.Close()
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer p.untrack(c)
				p.handle(c)
			}()
		}
	}()
}

// headSlots sizes the head cap from the tunnel cap: room for every tunnel
// to be replaced at once, and no more.
func headSlots(maxTunnels int) int {
	return max(2*maxTunnels, 8)
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// Close stops the listeners, cuts every connection and waits for them.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	for _, ln := range p.listeners {
		ln.Close()
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()
}

// acquire takes a tunnel slot.
func (p *Proxy) acquire() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.active >= p.cfg.MaxTunnels {
		return false
	}
	p.active++
	return true
}

func (p *Proxy) release() {
	p.mu.Lock()
	p.active--
	p.mu.Unlock()
}

// request is the head of what the jail sent.
type request struct {
	method, target, version string
	headers                 []string // raw "Name: value" lines
}

func readHead(br *bufio.Reader) (*request, error) {
	total := 0
	line := func() (string, error) {
		b, err := br.ReadSlice('\n')
		total += len(b)
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) || total > maxHead {
				return "", errors.New("request head too large")
			}
			return "", err
		}
		if total > maxHead {
			return "", errors.New("request head too large")
		}
		// Exactly one CRLF (or a bare LF, RFC 9112 2.2) ends a line; any
		// other CR stays in it, for headSyntax to refuse.
		l := strings.TrimSuffix(string(b), "\n")
		return strings.TrimSuffix(l, "\r"), nil
	}
	first, err := line()
	if err != nil {
		return nil, err
	}
	parts := strings.Split(first, " ")
	if len(parts) != 3 || parts[2] != "HTTP/1.1" && parts[2] != "HTTP/1.0" {
		return nil, fmt.Errorf("not an HTTP/1 request line: %q", first)
	}
	r := &request{method: parts[0], target: parts[1], version: parts[2]}
	for {
		h, err := line()
		if err != nil {
			return nil, err
		}
		if h == "" {
			return r, nil
		}
		if len(r.headers) >= 100 {
			return nil, errors.New("too many header lines")
		}
		r.headers = append(r.headers, h)
	}
}

// handle serves one connection from the jail: one CONNECT tunnel, or one
// absolute-form request for a port-80 rule.
func (p *Proxy) handle(c net.Conn) {
	br := bufio.NewReaderSize(c, maxHead)
	_ = c.SetReadDeadline(time.Now().Add(headTimeout))
	req, err := readHead(br)
	<-p.heads
	if err != nil {
		if !errors.Is(err, io.EOF) {
			p.refuse(c, Decision{Via: "request", Reason: "bad request: " + headError(err)}, 400)
		}
		return
	}
	dd := decide(req, p.cfg.Rules, p.cfg.Addrs, nil)
	if dd.refused() {
		p.refuse(c, dd.Decision, dd.status)
		return
	}
	if !p.acquire() {
		d := Decision{Host: dd.Host, Port: dd.Port, Via: dd.Via, Reason: fmt.Sprintf("tunnel limit: %d connections at once", p.cfg.MaxTunnels)}
		p.refuse(c, d, 503)
		return
	}
	defer p.release()
	if p.cfg.Relay && p.cfg.Upstream != nil {
		p.relay(c, br, req, dd)
		return
	}
	if dd.lookup != "" {
		if why := p.chargeLookup(dd.lookup); why != "" {
			dd.Reason = why
			p.refuse(c, dd.Decision, 403)
			return
		}
		rctx, cancel := context.WithTimeout(p.ctx, dialTimeout)
		addrs, err := p.resolve(rctx, dd.lookup)
		cancel()
		if dd = decide(req, p.cfg.Rules, p.cfg.Addrs, &resolved{addrs, err}); dd.refused() {
			p.refuse(c, dd.Decision, dd.status)
			return
		}
	}
	d, t, port, path := dd.Decision, dd.target, dd.Port, dd.path
	if r := p.spent(); r != "" {
		d.Allowed, d.Reason = false, r
		p.refuse(c, d, 403)
		return
	}
	up, addr, err := p.dial(p.ctx, t.addrs, port)
	if err != nil {
		d.Error = err.Error()
		p.answer(c, d, 502, p.dialFailure(t.addrs, port, err))
		return
	}
	defer up.Close()
	d.Address = addr.String()
	p.mu.Lock()
	p.conns[up] = struct{}{}
	p.mu.Unlock()
	defer func() { p.mu.Lock(); delete(p.conns, up); p.mu.Unlock() }()

	var first []byte
	if req.method == "CONNECT" {
		if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			return
		}
		// The lookup and dial took their own time; the ClientHello gets
		// a fresh one.
		_ = c.SetReadDeadline(time.Now().Add(headTimeout))
		hello, err := readClientHello(br)
		if err != nil {
			if errors.Is(err, io.EOF) {
				p.cfg.Log.Add(d) // opened and closed without a byte
				return
			}
			d.Allowed, d.Reason = false, err.Error()
			p.cfg.Log.Add(d)
			return
		}
		if r := checkSNI(hello, t); r != "" {
			d.Allowed, d.Reason = false, r
			p.cfg.Log.Add(d)
			return
		}
		first = hello.raw
	} else {
		p.forwardOne(c, up, []byte(originRequest(req, path, t.authority(port))), &d)
		p.cfg.Log.Add(d)
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	p.tunnel(c, br, up, first, &d)
	p.cfg.Log.Add(d)
}

// headSyntax says why a plain-HTTP head may not be forwarded. Its lines
// reach the origin as the jail wrote them, so any line the proxy and the
// origin (or a front before it) could split differently is refused, as RFC
// 9112 lets a server do: a bare CR ("X: a\rHost: internal"), an obs-fold
// continuation line, a line that is not "name: value", a control byte in a
// value, anything but a visible byte in the target.
func headSyntax(r *request) string {
	for i := 0; i < len(r.target); i++ {
		if r.target[i] <= ' ' || r.target[i] == 0x7f {
			return "bad request: a control byte or space in the request target"
		}
	}
	for _, h := range r.headers {
		if h[0] == ' ' || h[0] == '\t' {
			return "bad request: obs-fold (a header line continued on the next)"
		}
		name, value, ok := strings.Cut(h, ":")
		if !ok || name == "" || strings.IndexFunc(name, notTokenChar) >= 0 {
			return "bad request: a header line that is not NAME: VALUE"
		}
		for i := 0; i < len(value); i++ {
			if b := value[i]; b < ' ' && b != '\t' || b == 0x7f {
				if b == '\r' {
					return "bad request: a bare CR in a header"
				}
				return "bad request: a control byte in a header"
			}
		}
	}
	return ""
}

// notTokenChar is a rune a header name (an RFC 9110 token) may not hold.
func notTokenChar(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return false
	}
	return !strings.ContainsRune("!#$%&'*+-.^_`|~", r)
}

// bodyHeader says why a GET or HEAD that announces a body is refused.
func bodyHeader(r *request) string {
	for _, h := range r.headers {
		name, val, _ := strings.Cut(h, ":")
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "transfer-encoding":
			return "plain HTTP GET and HEAD carry no body (Transfer-Encoding)"
		case "content-length":
			if strings.TrimSpace(val) != "0" {
				return "plain HTTP GET and HEAD carry no body (Content-Length)"
			}
		}
	}
	return ""
}

// headError words a failure to read the head without the socket's
// addresses: the client port in a net.OpError made every failure a new
// kind, so a jail could fill the log with them.
func headError(err error) string {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Sprintf("no request head within %s", headTimeout)
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err.Error()
	}
	return err.Error()
}

// safeName makes an arbitrary string from the jail fit for a report: the
// quoting escapes NUL, newlines and other control bytes.
func safeName(s string) string {
	if len(s) > 300 {
		s = s[:300]
	}
	q := strconv.QuoteToASCII(s)
	if q[1:len(q)-1] == s {
		return s
	}
	return q
}

// refuse answers the jail with status and a reason phrase Python shows
// ("Tunnel connection failed: 403 stockade: loopback address") and
// records d.
func (p *Proxy) refuse(c net.Conn, d Decision, status int) {
	why := d.Reason
	if why == "" {
		why = d.Error
	}
	p.answer(c, d, status, why)
}

// dialFailure is what the jail is told of a failed dial: the checked
// addresses and the kernel's reason. d.Error, in the run's report, has the
// whole error, which through stockade's upstream proxy names that proxy's
// address and user and quotes its answer: the jail must see none of them.
func (p *Proxy) dialFailure(addrs []netip.Addr, port uint16, err error) string {
	var to []string
	for _, a := range addrs {
		to = append(to, netip.AddrPortFrom(a, port).String())
	}
	why := "cannot connect to " + strings.Join(to, ", ")
	if p.cfg.Upstream != nil {
		return why + " through stockade's upstream proxy"
	}
	var errno syscall.Errno
	var ne net.Error
	switch {
	case errors.As(err, &errno):
		why += ": " + errno.Error()
	case errors.As(err, &ne) && ne.Timeout():
		why += ": timed out"
	}
	return why
}

// answer records d and answers the jail with status and why.
func (p *Proxy) answer(c net.Conn, d Decision, status int, why string) {
	if d.Reason == "" && d.Error != "" {
		d.Allowed = true
	}
	p.cfg.Log.Add(d)
	why = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, why)
	body := "stockade: network: " + why + "\n"
	_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "HTTP/1.1 %d stockade: %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, why, len(body), body)
}

// target is a checked destination.
type target struct {
	name  string       // normalised name; "" for an address
	addrs []netip.Addr // every address it resolved to, all checked
}

func (t target) authority(port uint16) string {
	h := t.name
	if h == "" {
		h = t.addrs[0].String()
		if t.addrs[0].Is6() {
			h = "[" + h + "]"
		}
	}
	if port != 80 {
		h += ":" + strconv.Itoa(int(port))
	}
	return h
}

func dedup(s []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// checkSNI compares the ClientHello's server name with the CONNECT target.
func checkSNI(h *clientHello, t target) string {
	if !h.hasSNI {
		if t.name != "" {
			return fmt.Sprintf("TLS ClientHello names no server; the CONNECT named %s", t.name)
		}
		return ""
	}
	sni, err := NormalizeName(h.serverName)
	if err != nil {
		return "TLS server name is not a valid host name: " + safeName(h.serverName)
	}
	if sni != t.name {
		want := t.name
		if want == "" {
			want = t.addrs[0].String()
		}
		return fmt.Sprintf("TLS server name %s differs from the CONNECT target %s", sni, want)
	}
	return ""
}

// originRequest rewrites an absolute-form request for the origin server:
// origin-form path, the checked host in Host, no proxy or hop-by-hop
// headers, and one request per connection.
func originRequest(r *request, path, host string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s\r\nHost: %s\r\n", r.method, path, r.version, host)
	for _, h := range r.headers {
		name, _, _ := strings.Cut(h, ":")
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "host", "connection", "proxy-connection", "keep-alive", "proxy-authorization",
			"proxy-authenticate", "te", "trailer", "upgrade":
			continue
		}
		b.WriteString(h)
		b.WriteString("\r\n")
	}
	b.WriteString("Connection: close\r\n\r\n")
	return b.String()
}

// chargeLookup counts the name about to be looked up against the upload
// limit, or says why it may not be: under a wildcard rule the jail chooses
// the name, and the host's resolver carries it out to whoever serves the
// zone, so a lookup is an upload (DNS exfiltration). Once a limit is
// reached nothing is looked up.
func (p *Proxy) chargeLookup(name string) string {
	if why := p.spent(); why != "" {
		return why
	}
	n := int64(len(name))
	if p.up.Add(n) > p.cfg.MaxUpload {
		p.up.Add(-n)
		return fmt.Sprintf("upload limit of %d bytes per run reached (the names looked up count)", p.cfg.MaxUpload)
	}
	return ""
}

// spent says why no new tunnel may open once a byte limit is reached.
func (p *Proxy) spent() string {
	if p.up.Load() >= p.cfg.MaxUpload {
		return fmt.Sprintf("upload limit of %d bytes per run reached", p.cfg.MaxUpload)
	}
	if p.down.Load() >= p.cfg.MaxDownload {
		return fmt.Sprintf("download limit of %d bytes per run reached", p.cfg.MaxDownload)
	}
	return ""
}
