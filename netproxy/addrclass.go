package netproxy

import (
	"fmt"
	"net/netip"
)

// addrClass is a range of addresses a jail must not reach through its
// proxy. A private class can be opened by an explicit --allow-private CIDR
// (an internal package mirror, a service in the office network); the
// others never: whatever a rule or --allow-private lists, loopback is the
// host itself, link-local is the cloud's metadata service and the local
// segment, and the rest are not unicast destinations at all.
type addrClass struct {
	prefix  netip.Prefix
	reason  string
	private bool
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// metadataClass is a cloud provider's instance metadata or credential
// service: whoever reaches it from a VM gets the instance's identity, user
// data or credentials.
func metadataClass(prefix, provider string) addrClass {
	return addrClass{mustPrefix(prefix), "cloud metadata address (" + provider + ")", false}
}

// classes are checked in order, so the most specific reason comes first:
// the cloud metadata addresses before their link-local, CGNAT, IETF or ULA
// range. Those outside link-local are why this list exists: --allow-private
// 100.64.0.0/10 (CGNAT) would otherwise open Alibaba's, fc00::/7 GCP's, AWS's
// and Oracle's IPv6 ones, 192.0.0.0/24 Oracle Classic's. Each row cites the
// provider's own documentation (cloud-init's datasource where the provider
// publishes the address only in its agent). Services reached through a public
// name (Equinix Metal's metadata.platformequinix.com) are not addresses to
// list; the allowlist of names is the control there.
var classes = []addrClass{
	// AWS IMDS: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instancedata-data-retrieval.html
	// GCP: https://cloud.google.com/compute/docs/metadata/querying-metadata
	// Azure IMDS: https://learn.microsoft.com/azure/virtual-machines/instance-metadata-service
	// Oracle OCI: https://docs.oracle.com/en-us/iaas/Content/Compute/Tasks/gettingmetadata.htm
	// OpenStack: https://docs.openstack.org/nova/latest/admin/metadata-service.html
	// DigitalOcean: https://docs.digitalocean.com/reference/api/metadata/
	// Akamai/Linode: https://techdocs.akamai.com/cloud-computing/docs/metadata-service-api
	// IBM Cloud VPC: https://cloud.ibm.com/apidocs/vpc-identity ("http://169.254.169.254")
	// Huawei Cloud: https://support.huaweicloud.com/intl/en-us/usermanual-ecs/ecs_03_0166.html
	// Naver Cloud: https://api.ncloud-docs.com/docs/en/compute-vmetadata
	// Hetzner, Vultr, Exoscale, UpCloud, NWCS, CloudCIX: cloud-init's
	// cloudinit/sources/DataSource{Hetzner,Vultr,Exoscale,UpCloud,NWCS,CloudCIX}.py.
	metadataClass("169.254.169.254/32", "AWS, GCP, Azure, Oracle, OpenStack, DigitalOcean, Linode, IBM, Huawei and others"),
	// Amazon ECS task metadata and IAM role credentials:
	// https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-metadata-endpoint-v2.html
	metadataClass("169.254.170.2/32", "AWS ECS task credentials"),
	// Amazon EKS Pod Identity Agent, IPv4 and IPv6:
	// https://docs.aws.amazon.com/eks/latest/userguide/pod-id-agent-setup.html
	metadataClass("169.254.170.23/32", "AWS EKS Pod Identity"),
	metadataClass("fd00:ec2::23/128", "AWS EKS Pod Identity"),
	// Tencent Cloud's metadata.tencentyun.com:
	// https://www.tencentcloud.com/document/product/213/4934
	metadataClass("169.254.0.23/32", "Tencent Cloud"),
	// Scaleway, IPv4 and IPv6: cloud-init doc/rtd/reference/datasources/scaleway.rst
	metadataClass("169.254.42.42/32", "Scaleway"),
	metadataClass("fd00:42::42/128", "Scaleway IPv6"),
	// Azure WireServer (agent, DHCP, DNS; public address space):
	// https://learn.microsoft.com/azure/virtual-network/what-is-ip-address-168-63-129-16
	metadataClass("168.63.129.16/32", "Azure WireServer"),
	// Alibaba Cloud ECS and ECI (in CGNAT space):
	// https://www.alibabacloud.com/help/doc-detail/141788.htm, cloud-init aliyun.rst
	metadataClass("100.100.100.200/32", "Alibaba Cloud"),
	// Oracle Cloud Classic and Cloud at Customer (in 192.0.0.0/24):
	// https://docs.oracle.com/en/cloud/cloud-at-customer/occ-get-started/retrieve-predefined-instance-metadata.html
	metadataClass("192.0.0.192/32", "Oracle Cloud Classic"),
	// AWS IMDS over IPv6 (Nitro): the same page as its IPv4 address.
	metadataClass("fd00:ec2::254/128", "AWS IPv6"),
	// GCP's metadata server over IPv6 (IPv6-only VMs):
	// https://cloud.google.com/compute/docs/metadata/querying-metadata
	metadataClass("fd20:ce::254/128", "GCP IPv6"),
	// Oracle OCI IMDS over IPv6: cloud-init cloudinit/sources/DataSourceOracle.py
	// (IPV6_METADATA_ROOT), with https://docs.oracle.com/en-us/iaas/Content/Compute/Tasks/gettingmetadata.htm
	metadataClass("fd00:c1::a9fe:a9fe/128", "Oracle OCI IPv6"),
	// Akamai/Linode over IPv6: the Linode page above.
	metadataClass("fd00:a9fe:a9fe::1/128", "Akamai/Linode IPv6"),
	// OpenStack (since Victoria), Hetzner and Linode over IPv6 link-local:
	// the OpenStack and Linode pages above, cloud-init DataSourceHetzner.py.
	metadataClass("fe80::a9fe:a9fe/128", "OpenStack, Hetzner, Linode IPv6"),
	// The rest of AWS's IPv6 service range (its DNS resolver and NTP too).
	{mustPrefix("fd00:ec2::/32"), "cloud metadata range (AWS fd00:ec2::/32)", false},
	{mustPrefix("0.0.0.0/8"), "this-network address (0.0.0.0/8)", false},
	{mustPrefix("127.0.0.0/8"), "loopback address", false},
	{mustPrefix("169.254.0.0/16"), "link-local address", false},
	{mustPrefix("224.0.0.0/4"), "multicast address", false},
	{mustPrefix("240.0.0.0/4"), "reserved address (240.0.0.0/4, broadcast)", false},
	{mustPrefix("10.0.0.0/8"), "private address (RFC 1918)", true},
	{mustPrefix("172.16.0.0/12"), "private address (RFC 1918)", true},
	{mustPrefix("192.168.0.0/16"), "private address (RFC 1918)", true},
	{mustPrefix("100.64.0.0/10"), "shared address space (CGNAT, RFC 6598)", true},
	{mustPrefix("192.0.0.0/24"), "IETF protocol assignment (192.0.0.0/24)", true},
	{mustPrefix("198.18.0.0/15"), "benchmarking address (198.18.0.0/15)", true},
	// Reserved for documentation, so never on the internet; but networks do
	// use them inside (this project's own CI host has its gateway in
	// 192.0.2.0/24), so they are private like RFC 1918.
	{mustPrefix("192.0.2.0/24"), "documentation address (192.0.2.0/24, TEST-NET-1)", true},
	{mustPrefix("198.51.100.0/24"), "documentation address (198.51.100.0/24, TEST-NET-2)", true},
	{mustPrefix("203.0.113.0/24"), "documentation address (203.0.113.0/24, TEST-NET-3)", true},
	{mustPrefix("::/128"), "unspecified address", false},
	{mustPrefix("::1/128"), "loopback address", false},
	{mustPrefix("::ffff:0:0/96"), "IPv4-mapped IPv6 address", false},
	{mustPrefix("::/96"), "IPv4-compatible IPv6 address", false},
	{mustPrefix("64:ff9b::/96"), "NAT64 address (64:ff9b::/96)", false},
	{mustPrefix("64:ff9b:1::/48"), "NAT64 address (64:ff9b:1::/48)", false},
	{mustPrefix("100::/64"), "discard-only address (100::/64)", false},
	{mustPrefix("2001::/32"), "Teredo address (2001::/32)", false},
	{mustPrefix("2002::/16"), "6to4 address (2002::/16)", false},
	{mustPrefix("fe80::/10"), "link-local address", false},
	{mustPrefix("ff00::/8"), "multicast address", false},
	{mustPrefix("fc00::/7"), "unique local address (fc00::/7)", true},
	{mustPrefix("fec0::/10"), "site-local address (fec0::/10)", true},
	{mustPrefix("2001:db8::/32"), "documentation address (2001:db8::/32)", true},
}

// AddrPolicy decides which resolved addresses the proxy may dial.
type AddrPolicy struct {
	// AllowPrivate lists the --allow-private ranges: an address inside one
	// is allowed although its class is private (never loopback,
	// link-local, metadata or the host's own addresses).
	AllowPrivate []netip.Prefix
	// Own holds the host's interface addresses: the proxy runs on the
	// host, so one of them would reach the host's own services.
	Own []netip.Addr
}

// ParsePrivate parses --allow-private CIDRs. An entry that holds nothing
// but never-reachable addresses is an error, so that a user who writes
// --allow-private 169.254.169.254/32 learns it does nothing.
func ParsePrivate(entries []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range listItems(entries) {
		p, err := parsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("allow-private %q: want an address or CIDR: %v", s, err)
		}
		if c, ok := classOf(p.Addr()); ok && !c.private && c.prefix.Bits() <= p.Bits() {
			return nil, fmt.Errorf("allow-private %q: %s is never reachable from a jail", s, c.reason)
		}
		out = append(out, p)
	}
	return out, nil
}

func classOf(a netip.Addr) (addrClass, bool) {
	for _, c := range classes {
		if c.prefix.Contains(a) {
			return c, true
		}
	}
	return addrClass{}, false
}

// Check returns why addr must not be dialled, or "" when it may be; via
// names the --allow-private range that opened a private address.
func (p AddrPolicy) Check(addr netip.Addr) (reason, via string) {
	addr = addr.WithZone("")
	c, ok := classOf(addr)
	if ok && !c.private {
		return c.reason, ""
	}
	for _, o := range p.Own {
		if o.WithZone("") == addr {
			return "an address of this host", ""
		}
	}
	if !ok {
		return "", ""
	}
	if c.private {
		for _, pfx := range p.AllowPrivate {
			if pfx.Contains(addr) {
				return "", pfx.String()
			}
		}
		return c.reason + "; allow it with --allow-private", ""
	}
	return c.reason, ""
}

// never returns the class of an address no rule or --allow-private can
// open (loopback, link-local, metadata, the host's own addresses, ...), or
// "". Attempts at these are what an operator audits, so the log itemises
// them apart from the rest.
func (p AddrPolicy) never(addr netip.Addr) string {
	addr = addr.WithZone("")
	if c, ok := classOf(addr); ok && !c.private {
		return c.reason
	}
	for _, o := range p.Own {
		if o.WithZone("") == addr {
			return "an address of this host"
		}
	}
	return ""
}
