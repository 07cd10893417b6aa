package netproxy

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// decision is what decide makes of one request: refused (status set, and
// the record's Reason), waiting for a listed name's addresses (lookup
// set), or allowed to dial target.
type decision struct {
	Decision        // the record the run's report keeps
	status   int    // the answer's status when refused
	lookup   string // a listed name whose addresses decide: resolve it, then decide again
	target   target // the checked destination, once allowed
	path     string // plain HTTP: the origin-form path to forward
}

func (d decision) refused() bool { return d.status != 0 }

// resolved is a name's lookup as decide takes it: what the host's
// resolver said.
type resolved struct {
	addrs []netip.Addr
	err   error
}

// decide is the proxy's whole allow/refuse decision for one request head,
// as a pure function of the head, the allowlist and the address policy
// and, for a name, its lookup (nil before it): the request's shape, the
// method and port a plain-HTTP request may use, the rule that lists the
// target, and the address classes every address it resolves to must pass.
// What depends on the run's state (the tunnel cap, the byte limits and
// the lookup's charge to them) is handle's; every other refusal is here,
// in the order a reader checks it.
func decide(req *request, rules Rules, policy AddrPolicy, lookup *resolved) decision {
	refuse := func(d Decision, status int, why string) decision {
		d.Reason = why
		return decision{Decision: d, status: status}
	}
	var host, portStr, path string
	via := req.method
	switch {
	case req.method == "CONNECT":
		var err error
		host, portStr, err = net.SplitHostPort(req.target)
		if err != nil {
			return refuse(Decision{Host: safeName(req.target), Via: via}, 400, "CONNECT target is not HOST:PORT")
		}
	case len(req.target) > 7 && strings.EqualFold(req.target[:7], "http://"):
		if req.method != "GET" && req.method != "HEAD" {
			return refuse(Decision{Host: safeName(req.target), Via: safeName(req.method)}, 405, "plain HTTP carries only GET and HEAD")
		}
		if why := headSyntax(req); why != "" {
			return refuse(Decision{Host: safeName(req.target), Via: via}, 400, why)
		}
		// Exactly one request crosses: a body would be read by nobody but
		// the upstream, which could take it for a second, unchecked request.
		if why := bodyHeader(req); why != "" {
			return refuse(Decision{Host: safeName(req.target), Via: via}, 400, why)
		}
		host, portStr, path = splitAbsolute(req.target[7:])
	default:
		return refuse(Decision{Host: safeName(req.target), Via: safeName(req.method)}, 400, "only CONNECT (HTTPS) and absolute-form http:// requests are proxied")
	}
	port, err := parsePort(portStr)
	if err != nil {
		return refuse(Decision{Host: safeName(host), Via: via}, 400, "bad port "+strconv.Quote(portStr))
	}
	if req.method != "CONNECT" && port != 80 {
		return refuse(Decision{Host: safeName(host), Port: port, Via: via}, 403, "plain HTTP goes only to port 80 rules; use https")
	}
	d := decideTarget(host, port, rules, policy, lookup)
	d.Via, d.path = via, path
	return d
}

// splitAbsolute splits an absolute-form target after "http://" into host,
// port (80 if none) and origin-form path (no fragment).
func splitAbsolute(rest string) (host, port, path string) {
	end := strings.IndexAny(rest, "/?#")
	authority := rest
	path = "/"
	if end >= 0 {
		authority, path = rest[:end], rest[end:]
		if path[0] != '/' {
			path = "/" + path
		}
	}
	if i := strings.IndexByte(path, '#'); i >= 0 {
		path = path[:i]
	}
	host, port, err := net.SplitHostPort(authority)
	if err != nil {
		host, port = authority, "80"
		if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
			host = host[1 : len(host)-1]
		}
	}
	return host, port, path
}

// decideTarget applies the allowlist and the address classes to
// host:port.
func decideTarget(host string, port uint16, rules Rules, policy AddrPolicy, lookup *resolved) decision {
	d := Decision{Host: safeName(host), Port: port}
	refuse := func(why string) decision {
		d.Reason = why
		return decision{Decision: d, status: 403}
	}
	if a, err := netip.ParseAddr(host); err == nil {
		d.Host = a.String()
		if a.Zone() != "" {
			return refuse("an address with a zone")
		}
		r, ok := rules.MatchAddr(a, port)
		if !ok {
			if rules.anyPort("", a) {
				return refuse(fmt.Sprintf("port %d is not allowed for %s", port, a))
			}
			return refuse("IP address not in the allowlist (list the address or CIDR to allow it)")
		}
		d.Rule = r.Original
		d.Address = a.String()
		why, via := policy.Check(a)
		if why != "" {
			return refuse(why)
		}
		d.Private = via
		d.Allowed = true
		return decision{Decision: d, target: target{addrs: []netip.Addr{a}}}
	}
	name, err := NormalizeName(host)
	if err != nil {
		return refuse("invalid host name: " + err.Error())
	}
	d.Host = name
	r, ok := rules.MatchName(name, port)
	if !ok {
		if rules.anyPort(name, netip.Addr{}) {
			return refuse(fmt.Sprintf("port %d is not allowed for %s", port, name))
		}
		return refuse("not in the allowlist")
	}
	d.Rule = r.Original
	if lookup == nil {
		return decision{Decision: d, lookup: name}
	}
	if lookup.err != nil || len(lookup.addrs) == 0 {
		why := fmt.Sprintf("cannot resolve %s on the host", name)
		if lookup.err != nil {
			why += ": " + lookup.err.Error()
		}
		return refuse(why)
	}
	// Every address is checked before any is dialled: a name that
	// resolves to one public and one internal address is refused, not
	// dialled at the public one while the other waits for a retry.
	var vias []string
	for _, a := range lookup.addrs {
		why, via := policy.Check(a)
		if why != "" {
			d.Address = a.String()
			return refuse(fmt.Sprintf("%s resolves to %s: %s", name, a, why))
		}
		if via != "" {
			vias = append(vias, via)
		}
	}
	d.Private = strings.Join(dedup(vias), ",")
	d.Allowed = true
	return decision{Decision: d, target: target{name: name, addrs: lookup.addrs}}
}
