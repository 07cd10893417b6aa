package jail

import (
	"fmt"
	"net/url"

	"github.com/stockade/stockade/netproxy"
)

// NetworkDecision is one entry of the result's "network" list.
type NetworkDecision = netproxy.Decision

// ProxyPort is where the jail's egress proxy listens on the jail's own
// loopback (127.0.0.1 and [::1]); the proxy variables point there.
const ProxyPort = 3128

// NetworkSpec is what the jail may reach. With no Allow entries the jail
// has loopback only and no proxy at all: nothing listens, no proxy
// variable is set.
type NetworkSpec struct {
	// Allow lists the allowlist entries: "pypi.org", "*.example.com",
	// "api.example.com:443", "example.org:80", "203.0.113.7",
	// "198.51.100.0/24:8443" (see netproxy.ParseRule).
	Allow []string
	// AllowPrivate lists the private or special-purpose ranges a listed
	// name or address may resolve to (never loopback, link-local or the
	// cloud metadata addresses).
	AllowPrivate []string
	// MaxTunnels bounds the proxy's connections at once; MaxUpload and
	// MaxDownload the bytes each way over the run. Zero: the defaults.
	MaxTunnels  int
	MaxUpload   int64
	MaxDownload int64
}

// Enabled reports whether the jail gets a proxy.
func (n NetworkSpec) Enabled() bool { return len(n.Allow) > 0 }

// policy is the allowlist and the address policy parsed: the one parse
// the jail makes of them, for its check of the Spec and for the proxy.
func (n NetworkSpec) policy() (netproxy.Rules, netproxy.AddrPolicy, error) {
	rules, err := netproxy.ParseRules(n.Allow)
	if err != nil {
		return nil, netproxy.AddrPolicy{}, err
	}
	private, err := netproxy.ParsePrivate(n.AllowPrivate)
	if err != nil {
		return nil, netproxy.AddrPolicy{}, err
	}
	return rules, netproxy.AddrPolicy{AllowPrivate: private}, nil
}

func (n NetworkSpec) validate() error {
	if _, _, err := n.policy(); err != nil {
		return err
	}
	if n.MaxTunnels < 0 || n.MaxUpload < 0 || n.MaxDownload < 0 {
		return fmt.Errorf("network limits must not be negative")
	}
	return nil
}

func upstreamURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("upstream proxy %q: want http://[USER:PASSWORD@]HOST:PORT", redact(s))
	}
	return u, nil
}

// redact is s as an error may show it: the URL without its password, or
// none of it unless it parses with a host. url.Parse takes a proxy written
// without its scheme, "user:password@host:3128", as the scheme "user" and
// an opaque rest, which Redacted would print whole.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Opaque != "" || u.Host == "" {
		return "(not shown: not a URL with a host)"
	}
	return u.Redacted()
}

// proxyEnv is the jail's side of the proxy: every spelling Python's
// urllib, requests, pip and curl read. NO_PROXY is empty so that nothing
// is sent around the proxy (it would find no route anyway).
func proxyEnv(n NetworkSpec) []string {
	if !n.Enabled() {
		// pip retries an unreachable index five times with back-off, 8 s
		// in all, though there is no network to come back.
		return []string{"PIP_RETRIES=0"}
	}
	u := fmt.Sprintf("http://127.0.0.1:%d", ProxyPort)
	return []string{"HTTPS_PROXY=" + u, "HTTP_PROXY=" + u, "https_proxy=" + u, "http_proxy=" + u,
		"NO_PROXY=", "no_proxy="}
}
