// Package netproxy is the egress proxy of a jail with an allowlist: the only
// way from a jail's network namespace to the outside.
//
// The jail's namespace has loopback and nothing else: no route, no veth, no
// name server. Its init binds a listening socket on 127.0.0.1 (and [::1])
// inside that namespace and hands it to stockade, where a Proxy serves it
// from the host side. A jailed program reaches an allowed host by sending
// the proxy a CONNECT (HTTPS) or, for a rule that names port 80, an
// absolute-form GET; the proxy normalises the name, matches it against the
// Rules, resolves it on the host, refuses every address of a class that
// must never be reached from a jail (loopback, link-local and cloud
// metadata, private and special-purpose ranges, the host's own addresses),
// and dials the very address it checked, so that a second lookup cannot
// rebind the name. A CONNECT tunnel must open with a TLS ClientHello whose
// SNI is the name in the CONNECT.
//
// Every decision, allowed or refused, goes into a Log that becomes the
// run's "network" result. The package has no policy of its own beyond the
// address classes: which names are allowed comes from the profile.
package netproxy
