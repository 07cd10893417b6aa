package proctest

import (
	"bufio"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
)

// Upstream is a stand-in for the upstream proxy stockade's egress proxy
// dials through (its HTTPS_PROXY): the egress proxy never dials loopback
// itself, so this is how a listener on the host's loopback is named by a
// rule. It records every CONNECT target it is asked for, tunnels the one
// it stands for to that listener and answers any other with 502.
type Upstream struct {
	URL   string // http://127.0.0.1:PORT
	mu    sync.Mutex
	asked []string
}

// NewUpstream serves, until the test ends, CONNECT target as a tunnel to
// origin (a listener's address).
func NewUpstream(t *testing.T, target, origin string) *Upstream {
	t.Helper()
	u := &Upstream{}
	u.URL = "http://" + Listen(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		req, err := br.ReadString('\n')
		for l := ""; err == nil && l != "\r\n"; {
			l, err = br.ReadString('\n')
		}
		if err != nil {
			return
		}
		asked := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(req), "CONNECT "), " HTTP/1.1")
		u.mu.Lock()
		u.asked = append(u.asked, asked)
		u.mu.Unlock()
		if asked != target {
			io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
			return
		}
		o, err := net.Dial("tcp", origin)
		if err != nil {
			return
		}
		defer o.Close()
		io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
		go io.Copy(o, br)
		io.Copy(c, o)
	})
	return u
}

// Asked is every CONNECT target asked for so far, in order.
func (u *Upstream) Asked() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.asked)
}
