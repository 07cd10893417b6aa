package selftest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// sniName is the allowed name of the SNI attack; the suite's hosts file
// points it at fx.sniAddr.
const sniName = "selftest-sni.invalid"

// sniAttack asks the proxy for a tunnel to an allowed name and sends
// ClientHellos that name no server, an empty one and an invalid one. For the
// tunnel to reach the SNI check the proxy must dial, and the suite cannot
// dial anything outside the host; so the jail's proxy is given the suite's
// own upstream proxy (as stockade's HTTPS_PROXY would be), which answers
// every CONNECT and counts the bytes that follow: any byte is a hello the
// check let through.
func sniAttack() Attack {
	return Attack{Door: "network", Name: "proxy: a TLS ClientHello with no, an empty or an invalid server name",
		Expect: "proxy closes each tunnel, upstream sees no byte", program: "net_sni.py",
		allow: func(*fixtures) []string { return []string{sniName} },
		upstream: func(fx *fixtures) ([]string, string) {
			return []string{fx.sniAddr + "/32"}, "http://" + fx.upstream.Addr().String()
		},
		args:  fixed(sniName + ":443"),
		judge: andHost(heldLine, helloCrossed),
	}
}

// helloCrossed fails a run in which a tunnel carried bytes past the
// upstream's CONNECT, or in which no tunnel reached it (the check was then
// never tried).
func helloCrossed(o *outcome) string {
	up := o.fx.upstream
	if n := up.bytes.Load(); n > 0 {
		return fmt.Sprintf("%d bytes of ClientHello reached the server behind the proxy", n)
	}
	if up.tunnels.Load() == 0 {
		return "no tunnel reached the server behind the proxy: the SNI check was never tried"
	}
	return ""
}

// connectProxy is the suite's stand-in for stockade's upstream proxy: it
// accepts every CONNECT with a 200 and counts the tunnels and the bytes that
// arrive in them, sending nothing back.
type connectProxy struct {
	net.Listener
	tunnels atomic.Int64
	bytes   atomic.Int64
}

func newConnectProxy() (*connectProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for the upstream proxy: %w", err)
	}
	p := &connectProxy{Listener: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p, nil
}

func (p *connectProxy) serve(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(15 * time.Second))
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil || req.Method != http.MethodConnect {
		return
	}
	p.tunnels.Add(1)
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	n, _ := io.Copy(io.Discard, br)
	p.bytes.Add(n)
}
