package netproxy

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

// TestDecide holds the proxy's whole decision to a table, without a
// socket: the rows of TestAttackProxyRefusals, the plain-HTTP refusals,
// every never-reachable class (neverRanges, metadataAddrs) both as an IP
// literal and as what a listed name resolves to, and what is allowed.
func TestDecide(t *testing.T) {
	rules, err := ParseRules([]string{"example.com", "loop.example", "meta.example", "ten.example",
		"six.example", "mapped.example", "mixed.example", "203.0.113.0/24:8443", "plain.example:80",
		"never.example", "0.0.0.0/0", "[::/0]:443"})
	if err != nil {
		t.Fatal(err)
	}
	private, err := ParsePrivate(append([]string{"203.0.113.0/24"}, wideOpen...))
	if err != nil {
		t.Fatal(err)
	}
	policies := map[string]AddrPolicy{"none": {AllowPrivate: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}}, "wide": {AllowPrivate: private}}
	type row struct {
		method, target string
		headers        []string
		resolves       []string // what a name resolves to ("ERR": a failed lookup)
		status         int      // 0: allowed
		reason         string   // in the refusal
		never          bool     // itemised as never reachable
		policy         string   // "": both
	}
	rows := []row{
		{method: "CONNECT", target: "example.com:443", resolves: []string{"203.0.113.10"}},
		{method: "CONNECT", target: "EXAMPLE.com.:443", resolves: []string{"203.0.113.10"}},
		{method: "CONNECT", target: "203.0.113.10:8443"},
		{method: "GET", target: "http://plain.example/x?y#frag", resolves: []string{"203.0.113.11"}},
		{method: "HEAD", target: "http://plain.example:80", resolves: []string{"203.0.113.11"}},
		{method: "CONNECT", target: "loop.example:443", resolves: []string{"127.0.0.1"}, status: 403, reason: "loopback", never: true},
		{method: "CONNECT", target: "meta.example:443", resolves: []string{"169.254.169.254"}, status: 403, reason: "cloud metadata", never: true},
		{method: "CONNECT", target: "ten.example:443", resolves: []string{"10.0.0.5"}, status: 403, reason: "RFC 1918", policy: "none"},
		{method: "CONNECT", target: "six.example:443", resolves: []string{"::1"}, status: 403, reason: "loopback", never: true},
		{method: "CONNECT", target: "mapped.example:443", resolves: []string{"::ffff:127.0.0.1"}, status: 403, reason: "mapped", never: true},
		{method: "CONNECT", target: "mixed.example:443", resolves: []string{"203.0.113.12", "192.168.0.1"}, status: 403, reason: "192.168.0.1", policy: "none"},
		{method: "CONNECT", target: "mixed.example:443", resolves: []string{"192.168.0.1", "127.0.0.1"}, status: 403, reason: "127.0.0.1", never: true, policy: "wide"},
		{method: "CONNECT", target: "example.com:443", resolves: []string{"ERR"}, status: 403, reason: "cannot resolve example.com"},
		{method: "CONNECT", target: "example.com:443", resolves: []string{}, status: 403, reason: "cannot resolve example.com"},
		{method: "CONNECT", target: "203.0.113.10:443"}, // 0.0.0.0/0
		{method: "CONNECT", target: "169.254.169.254:80", status: 403, reason: "port 80 is not allowed for 169.254.169.254", never: true},
		{method: "CONNECT", target: "[2001:db8::1]:8443", status: 403, reason: "port 8443 is not allowed for 2001:db8::1"},
		{method: "CONNECT", target: "example.com:8443", status: 403, reason: "port 8443 is not allowed"},
		{method: "CONNECT", target: "example.com:80", status: 403, reason: "port 80 is not allowed"},
		{method: "CONNECT", target: "unlisted.example:443", status: 403, reason: "not in the allowlist"},
		{method: "CONNECT", target: "exa\x00mple.com:443", status: 403, reason: "invalid host name"},
		{method: "CONNECT", target: "example.com%00.evil:443", status: 403, reason: "invalid host name"},
		{method: "CONNECT", target: "user@example.com:443", status: 403, reason: "invalid host name"},
		{method: "CONNECT", target: "[::1]:443", status: 403, reason: "loopback", never: true},
		{method: "CONNECT", target: "[::ffff:127.0.0.1]:443", status: 403, reason: "mapped", never: true},
		{method: "CONNECT", target: "[fe80::1%lo]:443", status: 403, reason: "zone", never: true},
		{method: "CONNECT", target: "example.com", status: 400, reason: "HOST:PORT"},
		{method: "CONNECT", target: "example.com:99999", status: 400, reason: "bad port"},
		{method: "CONNECT", target: "127.0.0.1:443", status: 403, reason: "loopback", never: true},
		{method: "POST", target: "http://plain.example/", status: 405, reason: "only GET and HEAD"},
		{method: "GET", target: "http://plain.example:8080/", status: 403, reason: "only to port 80"},
		{method: "GET", target: "/relative", status: 400, reason: "only CONNECT"},
		{method: "GET", target: "http://plain.example/", headers: []string{"Content-Length: 5"}, status: 400, reason: "no body (Content-Length)"},
		{method: "GET", target: "http://plain.example/", headers: []string{"Transfer-Encoding: chunked"}, status: 400, reason: "Transfer-Encoding"},
		{method: "GET", target: "http://plain.example/", headers: []string{"X: a\rHost: internal"}, status: 400, reason: "bare CR"},
		{method: "GET", target: "http://plain.example/", headers: []string{"X: a", " folded"}, status: 400, reason: "obs-fold"},
		{method: "GET", target: "http://plain.example/a b", status: 400, reason: "control byte or space"},
	}
	for _, r := range neverRanges {
		rows = append(rows,
			row{method: "CONNECT", target: netip.AddrPortFrom(netip.MustParseAddr(r.addr), 443).String(), status: 403, reason: r.reason, never: true},
			row{method: "CONNECT", target: "never.example:443", resolves: []string{r.addr}, status: 403, reason: r.reason, never: true})
	}
	for _, a := range metadataAddrs {
		rows = append(rows, row{method: "CONNECT", target: "never.example:443", resolves: []string{a}, status: 403, reason: "cloud metadata", never: true})
	}
	// Without the catch-all rules, an address no rule lists.
	narrow, err := ParseRules([]string{"example.com"})
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"198.51.100.10:443", "[2001:db8::1]:443", "[::1]:443"} {
		req := &request{method: "CONNECT", target: target, version: "HTTP/1.1"}
		if d := decide(req, narrow, policies["wide"], nil); d.status != 403 || !strings.Contains(d.Reason, "IP address not in the allowlist") {
			t.Errorf("CONNECT %s with only example.com listed: %+v", target, d.Decision)
		}
	}
	for _, r := range rows {
		for name, policy := range policies {
			if r.policy != "" && r.policy != name {
				continue
			}
			req := &request{method: r.method, target: r.target, version: "HTTP/1.1", headers: r.headers}
			what := fmt.Sprintf("%s %q %v (%s)", r.method, r.target, r.resolves, name)
			d := decide(req, rules, policy, nil)
			if d.lookup != "" {
				if r.resolves == nil {
					t.Errorf("%s: looks %s up, and the row has no addresses", what, d.lookup)
					continue
				}
				lookup := &resolved{addrs: []netip.Addr{}}
				for _, s := range r.resolves {
					if s == "ERR" {
						lookup.err = errors.New("no such host")
						continue
					}
					lookup.addrs = append(lookup.addrs, netip.MustParseAddr(s))
				}
				d = decide(req, rules, policy, lookup)
			}
			switch {
			case d.lookup != "":
				t.Errorf("%s: still waiting for a lookup of %s", what, d.lookup)
			case d.status != r.status:
				t.Errorf("%s: status %d (%s), want %d (%s)", what, d.status, d.Reason, r.status, r.reason)
			case r.status == 0 && (!d.Allowed || len(d.target.addrs) == 0 || d.Rule == ""):
				t.Errorf("%s: allowed as %+v", what, d)
			case r.status != 0 && (d.Allowed || !strings.Contains(d.Reason, r.reason)):
				t.Errorf("%s: %+v, want refused saying %q", what, d.Decision, r.reason)
			case r.status != 0 && r.never != ((&Log{addrs: policy}).neverClass(d.Decision) != ""):
				t.Errorf("%s: never-reachable class %q, want itemised: %v", what, (&Log{addrs: policy}).neverClass(d.Decision), r.never)
			}
		}
	}
}

// A plain-HTTP request forwards the origin-form path, without the
// fragment, to the checked name.
func TestDecidePlainPath(t *testing.T) {
	rules, err := ParseRules([]string{"plain.example:80"})
	if err != nil {
		t.Fatal(err)
	}
	pol := AddrPolicy{AllowPrivate: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}}
	for target, want := range map[string]string{"http://plain.example/a?b#c": "/a?b", "http://plain.example?q": "/?q", "http://plain.example": "/"} {
		req := &request{method: "GET", target: target, version: "HTTP/1.1"}
		d := decide(req, rules, pol, &resolved{addrs: []netip.Addr{netip.MustParseAddr("203.0.113.11")}})
		if !d.Allowed || d.path != want || d.target.name != "plain.example" {
			t.Errorf("%s: %+v path %q, want allowed with path %q", target, d.Decision, d.path, want)
		}
	}
}
