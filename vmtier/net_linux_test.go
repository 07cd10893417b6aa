package vmtier

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/proctest"
	"github.com/stockade/stockade/jail"
)

// netFixture is the host's side of the network tests: an origin server on
// the host's loopback, reached as allowed.test (203.0.113.7) through a
// stand-in for stockade's own upstream proxy, which records every CONNECT
// it is asked for. The egress proxy never dials loopback itself, so the
// stand-in is how a listener on the host's loopback is named by a rule; it
// answers any other target with 502 (and records it: a target the rules
// refuse must never be asked for). loop.test resolves to 127.0.0.1, which
// the rules list and the address classes refuse.
type netFixture struct {
	*proctest.Upstream
	hosts string
}

const netOrigin = "203.0.113.7:80"

// netBig is the size of the download that crosses the channel.
const netBig = 320 << 10 // past one stream window (256 KiB)

func newNetFixture(t *testing.T) *netFixture {
	t.Helper()
	f := &netFixture{hosts: filepath.Join(t.TempDir(), "hosts")}
	err := os.WriteFile(f.hosts, []byte("203.0.113.7 allowed.test\n203.0.113.8 other.test\n127.0.0.1 loop.test\n"), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	origin := proctest.Listen(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		reqLine, _ := br.ReadString('\n')
		for {
			l, err := br.ReadString('\n')
			if err != nil || l == "\r\n" {
				break
			}
		}
		body := "hello from the host's loopback\n"
		if strings.HasPrefix(reqLine, "GET /big ") {
			body = strings.Repeat("0123456789abcdef", netBig/16)
		}
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	})
	f.Upstream = proctest.NewUpstream(t, netOrigin, origin)
	return f
}

func (f *netFixture) spec(t *testing.T, args ...string) jail.Spec {
	spec := vmSpec(t, args...)
	spec.Network.Allow = []string{"allowed.test:80", "loop.test:80"}
	spec.Network.AllowPrivate = []string{"203.0.113.0/24"}
	spec.Host.UpstreamProxy = f.URL
	spec.Host.HostsFile = f.hosts
	return spec
}

// channelGoroutines counts this process's goroutines in the network
// channel's code: none may outlive a run.
func channelGoroutines() int {
	buf := make([]byte, 1<<20)
	s := string(buf[:runtime.Stack(buf, true)])
	n := 0
	for _, g := range strings.Split(s, "\n\n") {
		if strings.Contains(g, "hashicorp/yamux") || strings.Contains(g, "netproxy.(*Proxy)") || strings.Contains(g, "vmtier.startHostNet") {
			n++
		}
	}
	return n
}

// A guest with an allowlist reaches, through its jail's proxy, the channel
// and the host's proxy, a listener on the host's loopback that a rule
// names; a name the rules do not list is refused by the guest's proxy, and
// one they list that resolves to loopback by the host's. The result's
// network entries are those the jail tier makes of the same payload, and
// nothing of the channel is left on the host.
func TestVMNetAllowedAndRefused(t *testing.T) {
	o := needVM(t)
	left := watch(&o)
	f := newNetFixture(t)
	const code = `
import sys, time, urllib.request, urllib.error
for name in ("allowed.test", "other.test", "loop.test"):
    try:
        print(name, "->", urllib.request.urlopen("http://" + name + "/hello", timeout=120).read().decode().strip())
    except urllib.error.HTTPError as e:
        print(name, "-> refused", e.code)
t = time.monotonic()
big = urllib.request.urlopen("http://allowed.test/big", timeout=240).read()
print("big:", len(big), big == b"0123456789abcdef" * (len(big) // 16))
print("big took %.1f s" % (time.monotonic() - t), file=sys.stderr)
`
	spec := f.spec(t, "python3", "-c", code)
	spec.Timeout = 4 * time.Minute
	res, err := runVM(t, spec, o)
	left.check(t)
	t.Logf("the guest: %s", strings.TrimSpace(res.Stderr))
	want := fmt.Sprintf("allowed.test -> hello from the host's loopback\nother.test -> refused 403\nloop.test -> refused 403\nbig: %d True\n", netBig)
	if err != nil || res.Verdict != jail.VerdictOK || res.Stdout != want {
		t.Fatalf("verdict %s, err %v, stdout %q, want %q; stderr %s", res.Verdict, err, res.Stdout, want, res.Stderr)
	}
	if n := channelGoroutines(); n != 0 {
		t.Errorf("%d goroutines of the network channel outlived the run", n)
	}
	if asked := f.Asked(); !slices.Equal(asked, []string{netOrigin, netOrigin}) {
		t.Errorf("the upstream was asked for %q, want %s twice", asked, netOrigin)
	}

	// The jail tier, on the host, with the same Spec and payload.
	js := spec
	js.Isolation = jail.IsolationJail
	js.VMEmulate = false
	var jr *jail.Result
	proctest.Within(t, 3*time.Minute, func(ctx context.Context) { jr, err = jail.Run(ctx, js, jail.Streams{}) })
	if err != nil || jr == nil || jr.Stdout != want {
		t.Fatalf("the jail tier: %v %+v", err, jr)
	}
	norm := func(ds []jail.NetworkDecision) []string {
		var out []string
		for _, d := range ds {
			out = append(out, fmt.Sprintf("%+v", d))
		}
		slices.Sort(out)
		return out
	}
	if vm, j := norm(res.Network), norm(jr.Network); !slices.Equal(vm, j) {
		t.Errorf("network entries differ:\nvm   %s\njail %s", strings.Join(vm, "\n     "), strings.Join(j, "\n     "))
	}
	var allowed, loop bool
	for _, d := range res.Network {
		allowed = allowed || d.Host == "allowed.test" && d.Allowed && d.Address == netOrigin && d.BytesDown > 0
		loop = loop || d.Host == "loop.test" && !d.Allowed && strings.Contains(d.Reason, "127.0.0.1")
	}
	if !allowed || !loop {
		t.Errorf("network %+v: want allowed.test dialled at %s by the host, loop.test refused for its address", res.Network, netOrigin)
	}
}

// TestAttackVMGuestRawStreams: a guest that writes its own requests on the
// channel, past its jail and its proxy (the "netraw" fault, as a guest
// kernel an attacker owns could), for an address and names the rules do
// not list, is refused by the host's proxy, which never asks for them; a
// listed one still works, so the refusals are the rules'.
func TestAttackVMGuestRawStreams(t *testing.T) {
	o := needVM(t)
	left := watch(&o)
	f := newNetFixture(t)
	targets := []string{"203.0.113.8:80", "other.test:80", "http://203.0.113.8/x", "allowed.test:80"}
	o.fault = "netraw " + strings.Join(targets, ",")
	spec := f.spec(t, "python3", "-c", "print('not run')")
	res, _ := runVM(t, spec, o)
	left.check(t)
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	if len(lines) != len(targets) {
		t.Fatalf("stdout %q, verdict %s, error %s", res.Stdout, res.Verdict, strOf(res.Error))
	}
	for i, target := range targets[:3] {
		if want := target + " -> HTTP/1.1 403 stockade: "; !strings.HasPrefix(lines[i], want) {
			t.Errorf("%s: %q, want the host's 403", target, lines[i])
		}
	}
	if want := "allowed.test:80 -> HTTP/1.1 200 "; !strings.HasPrefix(lines[3], want) {
		t.Errorf("%q: want %q", lines[3], want)
	}
	if asked := f.Asked(); !slices.Equal(asked, []string{netOrigin}) {
		t.Errorf("the upstream was asked for %q, want only %s", asked, netOrigin)
	}
	refused := 0
	for _, d := range res.Network {
		if !d.Allowed && (d.Host == "203.0.113.8" || d.Host == "other.test") {
			refused += d.Count
		}
	}
	if refused != 3 {
		t.Errorf("network %+v: want the host's three refusals", res.Network)
	}
	if n := channelGoroutines(); n != 0 {
		t.Errorf("%d goroutines of the network channel outlived the run", n)
	}
}

func strOf(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
