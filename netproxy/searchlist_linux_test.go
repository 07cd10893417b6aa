package netproxy

import (
	"context"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/loopback"
	"github.com/stockade/stockade/internal/testenv"
	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"
)

// searchListChild marks the re-executed test binary that runs in mount and
// network namespaces of its own; its value is the parent's namespaces.
const searchListChild = "STOCKADE_TEST_SEARCHLIST_NS"

// TestAttackProxySearchListExpansion: the host's resolver configuration
// had `search corp.test` and `options ndots:5` (Kubernetes gives every pod
// ndots:5 and three search domains). The proxy looked names up without a
// trailing dot, so an exact rule allowed.test was resolved as
// allowed.test.corp.test, and a wildcard rule's nonexistent names fell
// through to the search domain: the proxy dialled whatever address that
// zone's owner chose. Names are absolute: only the normalised name itself
// may be asked, and the proxy dials exactly the address it checked.
//
// It runs for real: the test binary re-executes itself in a mount namespace
// of its own, binds a resolv.conf and a hosts file over the host's there,
// and answers DNS on the loopback of its own network namespace.
func TestAttackProxySearchListExpansion(t *testing.T) {
	if parent := os.Getenv(searchListChild); parent != "" {
		searchListInNamespaces(t, parent)
		return
	}
	testenv.NeedRoot(t, "binds over /etc/resolv.conf in a mount namespace of its own")
	parent := nsID(t, "mnt") + " " + nsID(t, "net")
	cmd := exec.Command(os.Args[0], "-test.run=^TestAttackProxySearchListExpansion$", "-test.count=1", "-test.v", "-test.timeout=60s")
	cmd.Env = append(os.Environ(), searchListChild+"="+parent)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Go makes / MS_REC|MS_PRIVATE after unsharing the mount
		// namespace, so the binds below never reach the host's.
		Unshareflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWNET,
		Pdeathsig:    syscall.SIGKILL,
	}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "\nPASS") {
		t.Fatalf("in its own namespaces: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

func nsID(t *testing.T, kind string) string {
	t.Helper()
	id, err := os.Readlink("/proc/self/ns/" + kind)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// Addresses of the test's names: the attacker's zone (corp.test, reached by
// the search list) answers attacker for every name in it.
var (
	searchReal     = netip.MustParseAddr("203.0.113.10") // real.wild.test.
	searchHosts    = netip.MustParseAddr("203.0.113.12") // hosts.test, from the hosts file
	searchAttacker = netip.MustParseAddr("203.0.113.66") // *.corp.test.
)

func searchListInNamespaces(t *testing.T, parent string) {
	for _, kind := range []string{"mnt", "net"} {
		if own := nsID(t, kind); strings.Contains(parent, own) {
			t.Fatalf("%s is the parent's (%s): refusing to bind over the host's /etc/resolv.conf", own, parent)
		}
	}
	if err := loopback.Up(); err != nil {
		t.Fatal(err)
	}
	dns := startZone(t)
	dir := t.TempDir()
	for name, content := range map[string]string{
		"resolv.conf": "nameserver 127.0.0.1\nsearch corp.test\noptions ndots:5 timeout:2 attempts:1\n",
		"hosts":       "127.0.0.1 localhost\n" + searchHosts.String() + " hosts.test\n",
	} {
		src := filepath.Join(dir, name)
		if err := os.WriteFile(src, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount(src, "/etc/"+name, "", unix.MS_BIND, ""); err != nil {
			t.Fatalf("bind %s over /etc/%s: %v", src, name, err)
		}
	}

	// Every checked address is dialled at a sink on this namespace's
	// loopback; the address asked for is what the test looks at.
	sink, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	go func() {
		for {
			c, err := sink.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	var mu sync.Mutex
	var dialled []string
	rs, err := ParseRules([]string{"allowed.test", "*.wild.test", "hosts.test"})
	if err != nil {
		t.Fatal(err)
	}
	log := NewLog(nil, false)
	p := New(Config{
		Rules: rs,
		// The attacker's address passes the address check: only the
		// lookup itself can keep it out.
		Addrs: AddrPolicy{AllowPrivate: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}},
		Log:   log,
		DialContext: func(ctx context.Context, network, address string) (net.Conn, error) {
			mu.Lock()
			dialled = append(dialled, address)
			mu.Unlock()
			var d net.Dialer
			return d.DialContext(ctx, network, sink.Addr().String())
		},
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.Serve(ln)
	defer p.Close()

	for _, tc := range []struct{ target, want string }{
		{"allowed.test:443", " 403 "},   // exact rule; only allowed.test.corp.test exists
		{"nx.wild.test:443", " 403 "},   // wildcard rule; only nx.wild.test.corp.test exists
		{"real.wild.test:443", " 200 "}, // the absolute name exists
		{"hosts.test:443", " 200 "},     // the hosts file still answers an absolute name
	} {
		line, c := connect(t, ln.Addr().String(), tc.target)
		c.Close()
		if !strings.Contains(line+" ", tc.want) {
			t.Errorf("CONNECT %s: %q, want %q", tc.target, line, tc.want)
		}
	}
	p.Close()
	mu.Lock()
	defer mu.Unlock()
	want := []string{netip.AddrPortFrom(searchReal, 443).String(), netip.AddrPortFrom(searchHosts, 443).String()}
	if strings.Join(dialled, " ") != strings.Join(want, " ") {
		t.Errorf("dialled %v, want exactly the checked addresses %v (never the search domain's %s)", dialled, want, searchAttacker)
	}
	asked := dns.names()
	for _, n := range asked {
		if strings.HasSuffix(n, ".corp.test.") {
			t.Errorf("the proxy asked for %s: a search-list expansion", n)
		}
	}
	if !strings.Contains(strings.Join(asked, " "), "real.wild.test.") {
		t.Errorf("the zone was never asked for real.wild.test (asked: %v): the test did not exercise the resolver", asked)
	}
	for _, d := range log.Decisions() {
		if d.Allowed && d.Address != "" && !strings.HasPrefix(d.Address, searchReal.String()+":") && !strings.HasPrefix(d.Address, searchHosts.String()+":") {
			t.Errorf("allowed through an unchecked address: %+v", d)
		}
	}
}

// zone is the test's name server on 127.0.0.1:53: it knows real.wild.test.
// and every name in corp.test. (the attacker's), and records each question.
type zone struct {
	mu    sync.Mutex
	asked []string
}

func (z *zone) names() []string {
	z.mu.Lock()
	defer z.mu.Unlock()
	return append([]string(nil), z.asked...)
}

func startZone(t *testing.T) *zone {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:53")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	z := &zone{}
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if resp, ok := z.answer(buf[:n]); ok {
				_ = pc.SetWriteDeadline(time.Now().Add(time.Second))
				_, _ = pc.WriteTo(resp, from)
			}
		}
	}()
	return z
}

func (z *zone) answer(query []byte) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, false
	}
	q, err := p.Question()
	if err != nil {
		return nil, false
	}
	name := strings.ToLower(q.Name.String())
	z.mu.Lock()
	z.asked = append(z.asked, name)
	z.mu.Unlock()
	var addr netip.Addr
	switch {
	case name == "real.wild.test.":
		addr = searchReal
	case strings.HasSuffix(name, ".corp.test."):
		addr = searchAttacker
	}
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	if !addr.IsValid() {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	if b.StartQuestions() != nil || b.Question(q) != nil || b.StartAnswers() != nil {
		return nil, false
	}
	if addr.IsValid() && q.Type == dnsmessage.TypeA {
		rr := dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 60}
		if b.AResource(rr, dnsmessage.AResource{A: addr.As4()}) != nil {
			return nil, false
		}
	}
	out, err := b.Finish()
	return out, err == nil
}
