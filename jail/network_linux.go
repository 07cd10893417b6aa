package jail

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"

	"github.com/stockade/stockade/netproxy"
	"github.com/stockade/stockade/seccomp"
	"golang.org/x/sys/unix"
)

// runNetwork is one run's network side: the decisions log every attempt
// goes into and, with an allowlist, the proxy.
type runNetwork struct {
	log   *netproxy.Log
	proxy *netproxy.Proxy
}

// newRunNetwork prepares the proxy (it serves once init hands over the
// listeners). notices receives one line per distinct refusal.
func newRunNetwork(spec NetworkSpec, host Host, notices io.Writer) (*runNetwork, error) {
	n := &runNetwork{log: netproxy.NewLog(notices, !spec.Enabled())}
	if !spec.Enabled() {
		return n, nil
	}
	cfg, err := ProxyConfig(spec, host, n.log)
	if err != nil {
		return nil, err
	}
	n.proxy = netproxy.New(cfg)
	return n, nil
}

// ProxyConfig is the egress proxy's configuration for a run's network
// spec on this host, its decisions going into log: the one way both
// tiers build it (the jail's proxy, and the VM tier's host side, which
// decides again what its guest's proxy sends it).
func ProxyConfig(spec NetworkSpec, host Host, log *netproxy.Log) (netproxy.Config, error) {
	rules, policy, err := spec.policy()
	if err != nil {
		return netproxy.Config{}, err
	}
	cfg := netproxy.Config{Rules: rules, Addrs: policy,
		MaxTunnels: spec.MaxTunnels, MaxUpload: spec.MaxUpload, MaxDownload: spec.MaxDownload, Log: log}
	// The host's own addresses: the proxy dials from the host, where any
	// of them is the host's own services.
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return netproxy.Config{}, fmt.Errorf("list the host's addresses: %w", err)
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			cfg.Addrs.Own = append(cfg.Addrs.Own, p.Addr())
		}
	}
	if host.UpstreamProxy != "" {
		if cfg.Upstream, err = upstreamURL(host.UpstreamProxy); err != nil {
			return netproxy.Config{}, err
		}
		cfg.Relay = host.UpstreamDecides
	}
	if host.HostsFile != "" {
		if cfg.Resolve, err = netproxy.HostsResolver(host.HostsFile); err != nil {
			return netproxy.Config{}, err
		}
	}
	return cfg, nil
}

// serve takes the listening sockets init made in the jail's namespace.
func (n *runNetwork) serve(fds []int) error {
	if n.proxy == nil {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return fmt.Errorf("init sent proxy listeners to a jail without an allowlist")
	}
	var errs []error
	for _, fd := range fds {
		f := os.NewFile(uintptr(fd), "proxy listener")
		ln, err := net.FileListener(f)
		f.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("proxy listener: %w", err))
			continue
		}
		n.proxy.Serve(ln)
	}
	return errors.Join(errs...)
}

func (n *runNetwork) close() {
	if n != nil && n.proxy != nil {
		n.proxy.Close()
	}
}

// decisions is the result's network list.
func (n *runNetwork) decisions() []NetworkDecision {
	if n == nil {
		return []NetworkDecision{}
	}
	return n.log.Decisions()
}

// observer answers the jail's observed connect and send calls: its own
// loopback (the proxy included) continues, anything else is refused and
// recorded. The namespace has no route out, so the answer changes only
// how soon the caller learns it, not what it can reach.
func (n *runNetwork) observer(proxied bool) seccomp.NetObserver {
	return func(a seccomp.NetAttempt) bool {
		addr := a.Dest.Addr().Unmap()
		port := a.Dest.Port()
		if addr.IsLoopback() || addr.IsUnspecified() {
			if port == 53 {
				// glibc without a resolv.conf asks 127.0.0.1:53; nothing
				// answers in a jail, so the lookup fails at once.
				why := "name lookup: the jail has no name server"
				if proxied {
					why += " (names are resolved by the proxy: use HTTPS_PROXY)"
				}
				n.log.Add(netproxy.Decision{Host: addr.String(), Port: port, Via: "dns", Reason: why})
			}
			return true
		}
		why := "the jail has no network"
		if proxied {
			why = "direct connection: the jail reaches the network only through its proxy (HTTPS_PROXY)"
		}
		n.log.Add(netproxy.Decision{Host: addr.String(), Port: port, Via: a.Call, Reason: why})
		return false
	}
}
