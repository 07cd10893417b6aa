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
