package netproxy

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// DefaultPort is the port of a rule that names none. Plain HTTP (80) is
// never implied: it must be asked for.
const DefaultPort = 443

// Rule is one allowlist entry: an exact name, a "*.suffix" wildcard, or an
// IP address or CIDR, each with one port.
type Rule struct {
	Name     string       // normalised exact name; "" for wildcard and IP rules
	Suffix   string       // for "*.example.com": ".example.com"
	Prefix   netip.Prefix // for an IP or CIDR rule (an IP is a /32 or /128)
	Port     uint16
	Original string // as written, for reports
}

// Rules is a parsed allowlist. The zero value allows nothing.
type Rules []Rule

// ParseRules parses allowlist entries as a flag or profile gives them:
// "pypi.org", "api.example.com:443", "*.githubusercontent.com",
// "example.org:80", "203.0.113.7", "198.51.100.0/24:8443",
// "[2001:db8::1]:443". Entries may also be comma-separated.
func ParseRules(entries []string) (Rules, error) {
	var rs Rules
	for _, part := range listItems(entries) {
		r, err := ParseRule(part)
		if err != nil {
			return nil, err
		}
		rs = append(rs, r)
	}
	return rs, nil
}

// listItems splits entries as a flag given several times or a profile's
// list gives them, each of which may also be comma-separated, into their
// items, trimmed, skipping empty ones.
func listItems(entries []string) []string {
	var items []string
	for _, e := range entries {
		for _, s := range strings.Split(e, ",") {
			if s = strings.TrimSpace(s); s != "" {
				items = append(items, s)
			}
		}
	}
	return items
}

// ParseRule parses one allowlist entry.
func ParseRule(s string) (Rule, error) {
	r := Rule{Original: s, Port: DefaultPort}
	host := s
	if strings.HasPrefix(s, "[") {
		// [v6] or [v6/len], optionally :port.
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return r, fmt.Errorf("network rule %q: missing ]", s)
		}
		host = s[1:end]
		rest := s[end+1:]
		if rest != "" {
			if !strings.HasPrefix(rest, ":") {
				return r, fmt.Errorf("network rule %q: want [ADDRESS]:PORT", s)
			}
			p, err := parsePort(rest[1:])
			if err != nil {
				return r, fmt.Errorf("network rule %q: %w", s, err)
			}
			r.Port = p
		}
		pfx, err := parsePrefix(host)
		if err != nil || !pfx.Addr().Is6() {
			return r, fmt.Errorf("network rule %q: %q is not an IPv6 address or CIDR", s, host)
		}
		r.Prefix = pfx
		return r, nil
	}
	if strings.Count(s, ":") > 1 {
		// A bare IPv6 address or CIDR: no port can follow without brackets.
		pfx, err := parsePrefix(s)
		if err != nil {
			return r, fmt.Errorf("network rule %q: not an IPv6 address or CIDR (write a port as [ADDRESS]:PORT)", s)
		}
		r.Prefix = pfx
		return r, nil
	}
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		p, err := parsePort(s[i+1:])
		if err != nil {
			return r, fmt.Errorf("network rule %q: %w", s, err)
		}
		host, r.Port = s[:i], p
	}
	if pfx, err := parsePrefix(host); err == nil {
		r.Prefix = pfx
		return r, nil
	} else if strings.Contains(host, "/") || looksNumeric(host) {
		return r, fmt.Errorf("network rule %q: %v", s, err)
	}
	if suffix, ok := strings.CutPrefix(host, "*."); ok {
		n, err := NormalizeName(suffix)
		if err != nil {
			return r, fmt.Errorf("network rule %q: %w", s, err)
		}
		if !strings.Contains(n, ".") {
			// "*.com" would open a whole top-level domain.
			return r, fmt.Errorf("network rule %q: a wildcard needs at least two labels after *. (such as *.example.com)", s)
		}
		r.Suffix = "." + n
		return r, nil
	}
	n, err := NormalizeName(host)
	if err != nil {
		return r, fmt.Errorf("network rule %q: %w", s, err)
	}
	r.Name = n
	return r, nil
}

func parsePort(s string) (uint16, error) {
	p, err := strconv.ParseUint(s, 10, 16)
	if err != nil || p == 0 || strings.HasPrefix(s, "+") {
		return 0, fmt.Errorf("port %q: want 1-65535", s)
	}
	return uint16(p), nil
}

// parsePrefix parses an address (as a full-length prefix) or a CIDR. Zones
// (fe80::1%eth0) are refused: a rule names an address, not an interface.
func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		if p.Addr().Zone() != "" {
			return netip.Prefix{}, errors.New("zones are not allowed")
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if a.Zone() != "" {
		return netip.Prefix{}, errors.New("zones are not allowed")
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// looksNumeric is true for dotted digits that are not a valid address
// ("1.2.3", "010.1.1.1"): never a name.
func looksNumeric(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && c != '.' {
			return false
		}
	}
	return true
}

// lookup is the IDNA profile for names on the wire: UTS #46 mapping
// (case folding included), STD3 rules (letters, digits, hyphens), and
// hyphen and joiner checks.
var lookup = idna.New(idna.MapForLookup(), idna.Transitional(false), idna.StrictDomainName(true),
	idna.ValidateLabels(true), idna.BidiRule(), idna.CheckHyphens(true), idna.CheckJoiners(true))

// NormalizeName returns the canonical ASCII form of a DNS name: lower case,
// without the trailing dot, IDNA-encoded. Anything that is not a valid DNS
// name is an error: NUL and other control bytes, '%', spaces, userinfo,
// empty labels, labels over 63 or names over 253 bytes.
func NormalizeName(s string) (string, error) {
	if s == "" {
		return "", errors.New("empty host name")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x21 || c == 0x7f || strings.IndexByte("%@/\\:[]?#", c) >= 0 {
			return "", fmt.Errorf("host name %q: byte %q is not allowed in a DNS name", s, c)
		}
	}
	if !utf8.ValidString(s) {
		// IDNA maps invalid UTF-8 to U+FFFD and encodes that: the name
		// would match a rule the caller never wrote.
		return "", fmt.Errorf("host name %q: not valid UTF-8", s)
	}
	s = strings.TrimSuffix(s, ".")
	a, err := lookup.ToASCII(s)
	if err != nil {
		return "", fmt.Errorf("host name %q: %v", s, err)
	}
	a = strings.ToLower(a)
	if again, err := lookup.ToASCII(a); err != nil || again != a {
		// Only a name that is its own normal form is compared with the
		// rules: anything else is refused rather than guessed at.
		return "", fmt.Errorf("host name %q: its IDNA form %q is not a valid name", s, a)
	}
	if len(a) == 0 || len(a) > 253 {
		return "", fmt.Errorf("host name %q: not 1 to 253 bytes long", s)
	}
	for _, label := range strings.Split(a, ".") {
		if len(label) == 0 || len(label) > 63 {
			return "", fmt.Errorf("host name %q: every label must be 1 to 63 bytes", s)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return "", fmt.Errorf("host name %q: byte %q is not allowed in a DNS name", s, c)
			}
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return "", fmt.Errorf("host name %q: a label may not begin or end with a hyphen", s)
		}
	}
	if looksNumeric(a) {
		return "", fmt.Errorf("host name %q: looks like an address, not a name", s)
	}
	return a, nil
}

// MatchName returns the rule that allows the normalised name on port, if
// any. IP rules never match a name.
func (rs Rules) MatchName(name string, port uint16) (Rule, bool) {
	for _, r := range rs {
		if r.Port != port {
			continue
		}
		if r.Name != "" && r.Name == name {
			return r, true
		}
		if r.Suffix != "" && strings.HasSuffix(name, r.Suffix) {
			return r, true
		}
	}
	return Rule{}, false
}

// MatchAddr returns the IP rule that lists addr on port, if any.
func (rs Rules) MatchAddr(addr netip.Addr, port uint16) (Rule, bool) {
	for _, r := range rs {
		if r.Prefix.IsValid() && r.Port == port && r.Prefix.Contains(addr) {
			return r, true
		}
	}
	return Rule{}, false
}

// AnyPort reports whether some rule allows the name or address on another
// port, so a refusal can say "port not allowed" instead of "not listed".
func (rs Rules) anyPort(name string, addr netip.Addr) bool {
	for _, r := range rs {
		switch {
		case r.Name != "" && r.Name == name,
			r.Suffix != "" && name != "" && strings.HasSuffix(name, r.Suffix),
			r.Prefix.IsValid() && addr.IsValid() && r.Prefix.Contains(addr):
			return true
		}
	}
	return false
}
