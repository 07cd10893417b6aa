package netproxy

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

// metadataAddrs are the cloud metadata services as the providers document
// them (addrclass.go cites each source). The test keeps a list of its own,
// so that a row dropped from the table fails it.
var metadataAddrs = []string{
	"169.254.169.254",    // AWS, GCP, Azure, Oracle, OpenStack, DigitalOcean, Linode, IBM, Huawei, ...
	"169.254.170.2",      // AWS ECS task credentials
	"169.254.170.23",     // AWS EKS Pod Identity
	"169.254.0.23",       // Tencent Cloud
	"169.254.42.42",      // Scaleway
	"168.63.129.16",      // Azure WireServer
	"100.100.100.200",    // Alibaba Cloud (CGNAT space)
	"192.0.0.192",        // Oracle Cloud Classic (192.0.0.0/24)
	"fd00:ec2::254",      // AWS IPv6
	"fd00:ec2::23",       // AWS EKS Pod Identity IPv6
	"fd20:ce::254",       // GCP IPv6
	"fd00:c1::a9fe:a9fe", // Oracle OCI IPv6
	"fd00:a9fe:a9fe::1",  // Akamai/Linode IPv6
	"fd00:42::42",        // Scaleway IPv6
	"fe80::a9fe:a9fe",    // OpenStack, Hetzner, Linode IPv6 link-local
}

// wideOpen is every private range an operator might open, the ones that
// hold metadata addresses first, and then everything.
var wideOpen = []string{"100.64.0.0/10", "192.0.0.0/24", "fc00::/7", "fd00::/8", "fd20::/16", "0.0.0.0/0", "::/0"}

// TestMetadataAddressesNeverReachable: --allow-private 100.64.0.0/10
// opened Alibaba's 100.100.100.200 and fc00::/7 GCP's fd20:ce::254. No
// --allow-private opens any metadata address, none can be listed on its
// own, and each is refused as cloud metadata, not as its enclosing range.
func TestMetadataAddressesNeverReachable(t *testing.T) {
	private, err := ParsePrivate(wideOpen)
	if err != nil {
		t.Fatal(err)
	}
	pol := AddrPolicy{AllowPrivate: private}
	check := func(s string) {
		t.Helper()
		a := netip.MustParseAddr(s)
		if why, via := pol.Check(a); !strings.Contains(why, "cloud metadata") || via != "" {
			t.Errorf("%s with --allow-private %s: %q via %q, want refused as cloud metadata", s, strings.Join(wideOpen, ","), why, via)
		}
		if pol.never(a) == "" {
			t.Errorf("%s is not in the never-reachable bucket of the report", s)
		}
		if _, err := ParsePrivate([]string{s}); err == nil {
			t.Errorf("--allow-private %s accepted", s)
		}
	}
	for _, s := range metadataAddrs {
		check(s)
	}
	for _, c := range classes {
		if strings.Contains(c.reason, "cloud metadata") {
			check(c.prefix.Addr().String())
		}
	}
	// Only the metadata address itself: its neighbours in an opened range
	// stay open.
	for _, s := range []string{"100.100.100.201", "192.0.0.193", "fd20:ce::253", "fd00:c1::1"} {
		if why, _ := pol.Check(netip.MustParseAddr(s)); why != "" {
			t.Errorf("%s, a neighbour of a metadata address in an opened range: %q", s, why)
		}
	}
}

// TestAttackProxyMetadataThroughAllowPrivate: through the proxy, with every
// range that holds a metadata address opened by --allow-private and CIDR
// rules that list all addresses, neither an IP literal nor a listed name
// that resolves to a metadata address is dialled.
func TestAttackProxyMetadataThroughAllowPrivate(t *testing.T) {
	private, err := ParsePrivate(wideOpen)
	if err != nil {
		t.Fatal(err)
	}
	rules := []string{"0.0.0.0/0", "[::/0]:443"}
	names := map[string]netip.Addr{}
	for i, s := range metadataAddrs {
		name := fmt.Sprintf("meta%d.example", i)
		names[name] = netip.MustParseAddr(s)
		rules = append(rules, name)
	}
	f := newFixture(t, Config{
		Addrs: AddrPolicy{AllowPrivate: private},
		Resolve: func(_ context.Context, name string) ([]netip.Addr, error) {
			if a, ok := names[name]; ok {
				return []netip.Addr{a}, nil
			}
			return nil, fmt.Errorf("no such host %s", name)
		},
	}, rules...)
	for i, s := range metadataAddrs {
		literal := netip.AddrPortFrom(netip.MustParseAddr(s), 443).String()
		for _, target := range []string{literal, fmt.Sprintf("meta%d.example:443", i)} {
			line, c := connect(t, f.addr, target)
			c.Close()
			if !strings.HasPrefix(line, "HTTP/1.1 403 ") || !strings.Contains(line, "cloud metadata") {
				t.Errorf("CONNECT %s (%s): %q, want 403 cloud metadata", target, s, line)
			}
		}
	}
	ds := f.decisions()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.dialed) != 0 {
		t.Errorf("dialled %v", f.dialed)
	}
	for _, d := range ds {
		if d.Allowed {
			t.Errorf("allowed: %+v", d)
		}
	}
}

// neverRanges are the never-reachable rows outside the metadata addresses
// themselves that a private range or no range at all would otherwise
// cover: an address in each, the reason the proxy must give, and the row.
var neverRanges = []struct{ addr, reason, row string }{
	// 169.254.169.254 behind the local-use NAT64 prefix (RFC 8215): a
	// NAT64 gateway on the host's network dials the metadata service.
	{"64:ff9b:1::a9fe:a9fe", "NAT64 address (64:ff9b:1::/48)", "64:ff9b:1::/48"},
	{"64:ff9b::a9fe:a9fe", "NAT64 address (64:ff9b::/96)", "64:ff9b::/96"},
	// AWS's DNS resolver, inside fc00::/7, which --allow-private opens.
	{"fd00:ec2::253", "cloud metadata range (AWS fd00:ec2::/32)", "fd00:ec2::/32"},
	{"100::1", "discard-only address (100::/64)", "100::/64"},
}

// TestAttackProxyNeverReachableRanges: an IP literal or a listed name that
// resolves into a never-reachable range outside the metadata addresses
// (the NAT64 prefixes, AWS's service range, the discard prefix) is refused
// at the CONNECT and itemised as never reachable, both with no
// --allow-private and with every private range opened; and no
// --allow-private can name the range. Without the 64:ff9b:1::/48 row the
// metadata address behind a NAT64 was dialled with no --allow-private at
// all; without fd00:ec2::/32, --allow-private fc00::/7 opened AWS's range.
func TestAttackProxyNeverReachableRanges(t *testing.T) {
	wide, err := ParsePrivate(wideOpen)
	if err != nil {
		t.Fatal(err)
	}
	for _, open := range [][]netip.Prefix{nil, wide} {
		rules := []string{"0.0.0.0/0", "[::/0]:443"}
		names := map[string]netip.Addr{}
		for i, r := range neverRanges {
			name := fmt.Sprintf("never%d.example", i)
			names[name] = netip.MustParseAddr(r.addr)
			rules = append(rules, name)
		}
		f := newFixture(t, Config{
			Addrs: AddrPolicy{AllowPrivate: open},
			Resolve: func(_ context.Context, name string) ([]netip.Addr, error) {
				if a, ok := names[name]; ok {
					return []netip.Addr{a}, nil
				}
				return nil, fmt.Errorf("no such host %s", name)
			},
		}, rules...)
		for i, r := range neverRanges {
			literal := netip.AddrPortFrom(netip.MustParseAddr(r.addr), 443).String()
			for _, target := range []string{literal, fmt.Sprintf("never%d.example:443", i)} {
				line, c := connect(t, f.addr, target)
				c.Close()
				if !strings.HasPrefix(line, "HTTP/1.1 403 ") || !strings.Contains(line, r.reason) {
					t.Errorf("CONNECT %s (%s) with --allow-private %v: %q, want 403 %s", target, r.addr, open, line, r.reason)
				}
			}
		}
		ds := f.decisions()
		f.mu.Lock()
		if len(f.dialed) != 0 {
			t.Errorf("with --allow-private %v: dialled %v", open, f.dialed)
		}
		f.mu.Unlock()
		if len(ds) != 2*len(neverRanges) {
			t.Errorf("%d decisions, want %d: %+v", len(ds), 2*len(neverRanges), ds)
		}
		for _, d := range ds {
			if d.Allowed || f.log.neverClass(d) == "" {
				t.Errorf("with --allow-private %v: %+v, want refused as never reachable", open, d)
			}
		}
	}
	for _, r := range neverRanges {
		if _, err := ParsePrivate([]string{r.row}); err == nil || !strings.Contains(err.Error(), "never reachable") {
			t.Errorf("--allow-private %s: %v, want refused as never reachable", r.row, err)
		}
	}
}
