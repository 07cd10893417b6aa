package netproxy

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseRule(t *testing.T) {
	for _, tc := range []struct {
		in                   string
		name, suffix, prefix string
		port                 uint16
	}{
		{in: "pypi.org", name: "pypi.org", port: 443},
		{in: "PyPI.org.", name: "pypi.org", port: 443},
		{in: "api.example.com:443", name: "api.example.com", port: 443},
		{in: "example.org:80", name: "example.org", port: 80},
		{in: "*.githubusercontent.com", suffix: ".githubusercontent.com", port: 443},
		{in: "bücher.example", name: "xn--bcher-kva.example", port: 443},
		{in: "203.0.113.7", prefix: "203.0.113.7/32", port: 443},
		{in: "198.51.100.0/24:8443", prefix: "198.51.100.0/24", port: 8443},
		{in: "2001:db8::1", prefix: "2001:db8::1/128", port: 443},
		{in: "[2001:db8::/32]:80", prefix: "2001:db8::/32", port: 80},
	} {
		r, err := ParseRule(tc.in)
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		pfx := ""
		if r.Prefix.IsValid() {
			pfx = r.Prefix.String()
		}
		if r.Name != tc.name || r.Suffix != tc.suffix || pfx != tc.prefix || r.Port != tc.port {
			t.Errorf("%q: got name %q suffix %q prefix %q port %d", tc.in, r.Name, r.Suffix, pfx, r.Port)
		}
	}
}

func TestParseRuleRefusesWhatIsNotAName(t *testing.T) {
	for _, in := range []string{
		"", "exa mple.com", "user@example.com", "example.com%00", "exa\x00mple.com",
		"example.com:0", "example.com:65536", "example.com:http", "*.com", "*", "-bad.example",
		"a..b", "1.2.3", "999.1.1.1", "[2001:db8::1", "[203.0.113.1]:443", "fe80::1%eth0",
		"example.com/path", strings.Repeat("a", 64) + ".example", "ex_ample.com",
	} {
		if r, err := ParseRule(in); err == nil {
			t.Errorf("%q parsed as %+v", in, r)
		}
	}
}

func TestMatch(t *testing.T) {
	rs, err := ParseRules([]string{"pypi.org,*.pythonhosted.org", "plain.example:80", "203.0.113.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		port uint16
		ok   bool
	}{
		{"pypi.org", 443, true},
		{"pypi.org", 80, false},
		{"evilpypi.org", 443, false},
		{"pypi.org.evil.example", 443, false},
		{"files.pythonhosted.org", 443, true},
		{"a.b.pythonhosted.org", 443, true},
		{"pythonhosted.org", 443, false}, // *.suffix is below the suffix only
		{"plain.example", 80, true},
		{"plain.example", 443, false},
	} {
		if _, ok := rs.MatchName(tc.name, tc.port); ok != tc.ok {
			t.Errorf("MatchName(%s, %d) = %v", tc.name, tc.port, ok)
		}
	}
	if _, ok := rs.MatchAddr(netip.MustParseAddr("203.0.113.9"), 443); !ok {
		t.Error("203.0.113.9:443 not matched by 203.0.113.0/24")
	}
	if _, ok := rs.MatchAddr(netip.MustParseAddr("198.51.100.1"), 443); ok {
		t.Error("198.51.100.1 matched")
	}
}

func TestAddrClasses(t *testing.T) {
	private, err := ParsePrivate([]string{"10.1.0.0/16", "198.51.100.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	pol := AddrPolicy{AllowPrivate: private, Own: []netip.Addr{netip.MustParseAddr("198.51.100.77")}}
	for _, tc := range []struct {
		addr, want string // want: a word of the reason, "" = allowed
	}{
		{"93.184.216.34", ""},
		{"2606:2800:220:1::1", ""},
		{"203.0.113.5", "documentation"},
		{"192.0.2.1", "documentation"},
		{"2001:db8::1", "documentation"},
		{"198.51.100.9", ""}, // --allow-private
		{"127.0.0.1", "loopback"},
		{"127.255.0.1", "loopback"},
		{"::1", "loopback"},
		{"0.0.0.0", "this-network"},
		{"::", "unspecified"},
		{"169.254.169.254", "cloud metadata"},
		{"169.254.1.1", "link-local"},
		{"168.63.129.16", "Azure"},
		{"fd00:ec2::254", "AWS"},
		// The rest of AWS's service range (its DNS resolver fd00:ec2::253,
		// NTP fd00:ec2::123) is never reachable, not a private ULA.
		{"fd00:ec2::253", "AWS fd00:ec2::/32"},
		{"fd00:ec2:ffff::1", "AWS fd00:ec2::/32"},
		{"fd00:ec3::1", "unique local"}, // its neighbour is an ordinary ULA
		// The local-use NAT64 prefix (RFC 8215) carries any IPv4 address,
		// the metadata service's among them.
		{"64:ff9b:1::a9fe:a9fe", "NAT64 address (64:ff9b:1::/48)"},
		{"64:ff9b:1:ffff::1", "NAT64 address (64:ff9b:1::/48)"},
		{"64:ff9b::a9fe:a9fe", "NAT64 address (64:ff9b::/96)"},
		{"100::1", "discard-only"},
		{"100::ffff:ffff:ffff:ffff", "discard-only"},
		{"fec0::1", "site-local"},
		{"feff::1", "site-local"},
		{"fe80::1", "link-local"},
		{"10.0.0.1", "RFC 1918"},
		{"10.1.2.3", ""}, // --allow-private
		{"172.16.5.5", "RFC 1918"},
		{"192.168.1.1", "RFC 1918"},
		{"100.64.0.1", "CGNAT"},
		{"224.0.0.251", "multicast"},
		{"ff02::1", "multicast"},
		{"255.255.255.255", "reserved"},
		{"fc00::1", "unique local"},
		{"fd12::1", "unique local"},
		{"::ffff:127.0.0.1", "mapped"},
		{"::ffff:93.184.216.34", "mapped"},
		{"::127.0.0.1", "compatible"},
		{"64:ff9b::7f00:1", "NAT64"},
		{"2002:7f00:1::1", "6to4"},
		{"2001:0:4136:e378::1", "Teredo"},
		{"198.18.0.1", "benchmarking"},
		{"198.51.100.77", "this host"},
	} {
		why, _ := pol.Check(netip.MustParseAddr(tc.addr))
		if tc.want == "" && why != "" || tc.want != "" && !strings.Contains(why, tc.want) {
			t.Errorf("%s: %q, want %q", tc.addr, why, tc.want)
		}
	}
}

func TestAllowPrivateNeverOpensLoopbackOrMetadata(t *testing.T) {
	for _, in := range []string{"127.0.0.1", "127.0.0.0/8", "169.254.169.254", "169.254.0.0/16", "::1", "fe80::/10", "fd00:ec2::254"} {
		if _, err := ParsePrivate([]string{in}); err == nil {
			t.Errorf("--allow-private %s accepted", in)
		}
	}
	all, err := ParsePrivate([]string{"0.0.0.0/0", "::/0"})
	if err != nil {
		t.Fatal(err)
	}
	pol := AddrPolicy{AllowPrivate: all}
	for _, a := range []string{"127.0.0.1", "169.254.169.254", "::1", "fe80::1", "::ffff:10.0.0.1", "224.0.0.1"} {
		if why, _ := pol.Check(netip.MustParseAddr(a)); why == "" {
			t.Errorf("--allow-private 0.0.0.0/0,::/0 opened %s", a)
		}
	}
	if why, via := pol.Check(netip.MustParseAddr("10.9.9.9")); why != "" || via != "0.0.0.0/0" {
		t.Errorf("10.9.9.9: %q via %q", why, via)
	}
}

func FuzzNormalizeName(f *testing.F) {
	for _, s := range []string{"pypi.org", "Bücher.example.", "a\x00b", "x%41.com", "[::1]", "1.2.3.4", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := NormalizeName(s)
		if err != nil {
			return
		}
		// Whatever passes is a plain LDH name that normalises to itself.
		if m, err := NormalizeName(n); err != nil || m != n {
			t.Fatalf("%q -> %q -> %q, %v", s, n, m, err)
		}
		if _, err := netip.ParseAddr(n); err == nil {
			t.Fatalf("%q normalised to an address %q", s, n)
		}
	})
}
