package netproxy

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestProxyRelaysToADecidingUpstream: a proxy with Relay (the VM guest's)
// hands what its rules allow to a deciding upstream (the host's proxy,
// here the fixture's) unresolved: HTTPS and plain HTTP work through both,
// the upstream's refusal (a listed name resolving to loopback) reaches the
// client as a refusal, a name the rules do not list never leaves the
// relaying proxy, and the relaying proxy resolves nothing itself.
func TestProxyRelaysToADecidingUpstream(t *testing.T) {
	rules := []string{"example.com", "plain.example:80", "loop.example"}
	host := newFixture(t, Config{}, rules...)
	rs, err := ParseRules(rules)
	if err != nil {
		t.Fatal(err)
	}
	up, _ := url.Parse("http://" + host.addr)
	glog := NewLog(nil, false)
	guest := New(Config{Rules: rs, Upstream: up, Relay: true, Log: glog,
		Addrs: AddrPolicy{AllowPrivate: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}},
		Resolve: func(_ context.Context, name string) ([]netip.Addr, error) {
			t.Errorf("the relaying proxy looked %s up", name)
			return nil, io.EOF
		}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	guest.Serve(ln)
	defer guest.Close()
	pu, _ := url.Parse("http://" + ln.Addr().String())
	pool := host.tls.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: pool}}}
	get := func(u string) string {
		resp, err := c.Get(u)
		if err != nil {
			return "error: " + err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.Status + " " + string(b)
	}
	if got := get("https://example.com/x"); got != "200 OK hello from example.com /x" {
		t.Errorf("https: %q", got)
	}
	if got := get("http://plain.example/y"); got != "200 OK hello from plain.example /y" {
		t.Errorf("http: %q", got)
	}
	if got := get("https://loop.example/"); !strings.Contains(got, "stockade: the host's proxy: loop.example resolves to 127.0.0.1") {
		t.Errorf("loop.example: %q, want the upstream's 403", got)
	}
	if got := get("https://unlisted.example/"); !strings.Contains(got, "stockade: not in the allowlist") {
		t.Errorf("unlisted.example: %q, want the relaying proxy's refusal", got)
	}
	guest.Close()
	var hosts []string
	for _, d := range host.decisions() {
		hosts = append(hosts, d.Host)
		if d.Host == "example.com" && (!d.Allowed || d.Address != "203.0.113.10:443" || d.BytesDown == 0) {
			t.Errorf("upstream's decision %+v", d)
		}
	}
	if strings.Contains(strings.Join(hosts, " "), "unlisted") || len(hosts) != 3 {
		t.Errorf("the upstream decided for %q, want example.com, plain.example and loop.example", hosts)
	}
	for _, d := range glog.Decisions() {
		if d.Host == "loop.example" && (d.Allowed || !strings.HasPrefix(d.Reason, "the host's proxy: ")) {
			t.Errorf("relaying proxy's decision %+v", d)
		}
		// What the rules allowed and the upstream served is recorded as
		// allowed: no refusal without a reason, and no notice of one.
		if (d.Host == "example.com" || d.Host == "plain.example") && (!d.Allowed || d.Reason != "") {
			t.Errorf("relaying proxy's decision %+v, want allowed", d)
		}
	}
}
