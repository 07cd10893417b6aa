package netproxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// relay hands a request the rules allow to a deciding upstream
// (Config.Relay) as the jail asked it: this proxy has checked the rule and
// the request's shape; the upstream resolves the name, checks every
// address, dials and answers. Its refusal reaches the jail as its own,
// with the upstream's reason.
func (p *Proxy) relay(c net.Conn, br *bufio.Reader, req *request, dd decision) {
	// The rules allow it: a listed name's decision waits for a lookup
	// this proxy never makes, and would be recorded (and noticed) as a
	// refusal without a reason. What the upstream refuses is recorded
	// as refused below, with its reason.
	d := dd.Decision
	d.Allowed = true
	if r := p.spent(); r != "" {
		d.Allowed, d.Reason = false, r
		p.refuse(c, d, 403)
		return
	}
	t := dd.target
	if dd.lookup != "" {
		t = target{name: dd.lookup}
	}
	host := t.name
	if host == "" {
		host = t.addrs[0].String()
	}
	authority := net.JoinHostPort(host, strconv.Itoa(int(d.Port)))
	if req.method != "CONNECT" {
		if p.relayOne(c, req, dd, t, &d) {
			p.cfg.Log.Add(d)
		}
		return
	}
	up, resp, err := p.upstreamConnect(p.ctx, authority)
	if err != nil {
		d.Error = err.Error()
		p.answer(c, d, 502, "cannot reach "+authority+" through the host's proxy")
		return
	}
	defer up.Close()
	if !p.track(up) {
		return
	}
	defer p.untrack(up)
	if resp.StatusCode != 200 {
		d.Allowed = false
		d.Reason = "the host's proxy: " + upstreamReason(resp.Status)
		p.refuse(c, d, resp.StatusCode)
		return
	}
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	_ = c.SetReadDeadline(time.Now().Add(headTimeout))
	hello, err := readClientHello(br)
	if err != nil {
		if errors.Is(err, io.EOF) {
			p.cfg.Log.Add(d)
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
	_ = c.SetReadDeadline(time.Time{})
	p.tunnel(c, br, up, hello.raw, &d)
	p.cfg.Log.Add(d)
}

// relayOne sends a plain-HTTP request on as an absolute-form request,
// rewritten as for an origin (no proxy or hop-by-hop headers, one
// request), and copies the answer back. It reports whether d is still to
// be recorded.
func (p *Proxy) relayOne(c net.Conn, req *request, dd decision, t target, d *Decision) bool {
	dial := p.cfg.DialContext
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	u := p.cfg.Upstream
	hostport := u.Host
	if u.Port() == "" {
		hostport = net.JoinHostPort(u.Hostname(), "80")
	}
	up, err := dial(p.ctx, "tcp", hostport)
	if err != nil {
		d.Error = fmt.Sprintf("upstream proxy %s: %v", u.Host, err)
		p.answer(c, *d, 502, "cannot reach the host's proxy")
		return false
	}
	defer up.Close()
	if !p.track(up) {
		return false
	}
	defer p.untrack(up)
	authority := t.authority(d.Port)
	head := originRequest(req, dd.path, authority)
	// The request line in absolute form, for a proxy.
	head = req.method + " http://" + authority + strings.TrimPrefix(head, req.method+" ")
	p.forwardOne(c, up, []byte(head), d)
	return true
}

// upstreamReason is the reason phrase of a stockade proxy's refusal
// ("403 stockade: not in the allowlist"), without its status and prefix.
func upstreamReason(status string) string {
	_, why, _ := strings.Cut(status, " ")
	return safeName(strings.TrimPrefix(why, "stockade: "))
}
