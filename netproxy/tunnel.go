package netproxy

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
)

// dial connects to the first of the checked addresses that answers, never
// to a name: a second lookup could return something the check never saw
// (DNS rebinding).
func (p *Proxy) dial(ctx context.Context, addrs []netip.Addr, port uint16) (net.Conn, netip.AddrPort, error) {
	var errs []error
	for _, a := range addrs {
		ap := netip.AddrPortFrom(a, port)
		dctx, cancel := context.WithTimeout(ctx, dialTimeout)
		c, err := p.dialOne(dctx, ap)
		cancel()
		if err == nil {
			return c, ap, nil
		}
		errs = append(errs, err)
	}
	return nil, netip.AddrPort{}, fmt.Errorf("upstream: %w", errors.Join(errs...))
}

func (p *Proxy) dialOne(ctx context.Context, ap netip.AddrPort) (net.Conn, error) {
	dial := p.cfg.DialContext
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	u := p.cfg.Upstream
	if u == nil {
		return dial(ctx, "tcp", ap.String())
	}
	c, resp, err := p.upstreamConnect(ctx, ap.String())
	if err == nil && resp.StatusCode != 200 {
		c.Close()
		return nil, fmt.Errorf("upstream proxy %s refused CONNECT %s: %s", u.Host, ap, resp.Status)
	}
	return c, err
}

// upstreamConnect opens a tunnel to authority through the upstream proxy:
// the connection once it answered 200, or the status it answered instead
// (with the connection, its answer's body unread).
func (p *Proxy) upstreamConnect(ctx context.Context, authority string) (net.Conn, *http.Response, error) {
	dial := p.cfg.DialContext
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	u := p.cfg.Upstream
	// Errors say which upstream by its address alone: they reach the
	// jail (a 502's reason) and the result, and the credentials stockade
	// logs in with are none of the jail's business, its user name included.
	name := u.Host
	hostport := u.Host
	if u.Port() == "" {
		hostport = net.JoinHostPort(u.Hostname(), "80")
	}
	c, err := dial(ctx, "tcp", hostport)
	if err != nil {
		return nil, nil, fmt.Errorf("upstream proxy %s: %w", name, err)
	}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	req := fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n", authority, authority)
	if u.User != nil {
		pw, _ := u.User.Password()
		req += "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+pw)) + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("upstream proxy %s: %w", name, err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("upstream proxy %s: %w", name, err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return c, resp, nil
	}
	if br.Buffered() > 0 {
		c.Close()
		return nil, nil, fmt.Errorf("upstream proxy %s sent data before the tunnel opened", name)
	}
	return c, resp, nil
}

// chunk is the most one copy step moves before it accounts for it against
// the run's limits.
const chunk = 4 << 20

// tunnel copies both ways until both are done, first sending first (the
// checked ClientHello or the rewritten request head) upstream, and counts
// every byte against the run's limits; reaching one cuts the tunnel.
func (p *Proxy) tunnel(c net.Conn, br *bufio.Reader, up net.Conn, first []byte, d *Decision) {
	var cutOnce sync.Once
	var cut atomic.Value
	cutWith := func(why string) {
		cutOnce.Do(func() {
			cut.Store(why)
			c.Close()
			up.Close()
		})
	}
	var upBytes, downBytes int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// Whatever the head reader buffered past the head belongs to the
		// stream, then the socket itself.
		src := io.MultiReader(bytesReader(first), io.LimitReader(br, int64(br.Buffered())), c)
		upBytes = p.copyCounted(up, src, &p.up, p.cfg.MaxUpload, "upload", cutWith)
		closeWrite(up)
	}()
	downBytes = p.copyCounted(c, up, &p.down, p.cfg.MaxDownload, "download", cutWith)
	closeWrite(c)
	wg.Wait()
	d.BytesUp, d.BytesDown = upBytes, downBytes
	if v, ok := cut.Load().(string); ok {
		d.Cut = v
	}
}

// forwardOne sends the one rewritten plain-HTTP request head upstream and
// copies the response back, then the connection ends. Nothing more the
// jail sends is read: a pipelined second request (another method, another
// Host) would otherwise reach the upstream unchecked.
func (p *Proxy) forwardOne(c net.Conn, up net.Conn, head []byte, d *Decision) {
	var cutOnce sync.Once
	var cut string
	cutWith := func(why string) {
		cutOnce.Do(func() {
			cut = why
			c.Close()
			up.Close()
		})
	}
	d.BytesUp = p.copyCounted(up, bytesReader(head), &p.up, p.cfg.MaxUpload, "upload", cutWith)
	if d.BytesUp == int64(len(head)) {
		d.BytesDown = p.copyCounted(c, up, &p.down, p.cfg.MaxDownload, "download", cutWith)
	}
	closeWrite(c)
	d.Cut = cut
}

type byteReader struct{ b []byte }

func (r *byteReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

func bytesReader(b []byte) io.Reader { return &byteReader{b: b} }

// copyCounted copies src to dst in steps of at most chunk bytes, each
// reserved against the run's total first, so that concurrent tunnels
// cannot overshoot the limit together. Between socket pairs io.Copy
// splices, so the bytes do not pass through this process's memory.
func (p *Proxy) copyCounted(dst io.Writer, src io.Reader, total *atomic.Int64, limit int64, what string, cut func(string)) int64 {
	var moved int64
	for {
		grant := int64(chunk)
		after := total.Add(grant)
		if over := after - limit; over > 0 {
			grant -= over
			if grant <= 0 {
				total.Add(-int64(chunk))
				// Something is still waiting to cross: that is what the
				// limit is for. A quiet stream just ends.
				var one [1]byte
				if n, _ := src.Read(one[:]); n > 0 {
					cut(fmt.Sprintf("%s limit of %d bytes per run reached", what, limit))
				}
				return moved
			}
			total.Add(-over)
		}
		n, err := io.Copy(dst, io.LimitReader(src, grant))
		moved += n
		total.Add(n - grant) // return what was not used
		if err != nil || n < grant {
			return moved
		}
	}
}

func closeWrite(c any) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}
