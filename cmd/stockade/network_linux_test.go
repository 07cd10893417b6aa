package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stockade/stockade/internal/netnstest"
	"github.com/stockade/stockade/internal/testenv"
)

func quietLog() *log.Logger { return log.New(io.Discard, "", 0) }

// TestNetAllowedNameWorksWithUrllibRequestsAndPip: an allowlisted name
// works through the proxy with the three clients Python code uses, and the
// result lists each tunnel with the address the proxy checked and dialled.
func TestNetAllowedNameWorksWithUrllibRequestsAndPip(t *testing.T) {
	n := newTestNet(t)
	n.serveUpstream()
	script := `
import urllib.request, requests
print(urllib.request.urlopen("https://pkg.stockade.test/hello").read().decode())
print(requests.get("https://pkg.stockade.test/hello").text)
print(urllib.request.urlopen("http://plain.stockade.test/hello").read().decode())
`
	args := append([]string{"--allow-net", "pkg.stockade.test,plain.stockade.test:80"}, n.caArgs()...)
	r := n.runJSON(append(args, "--", "python3", "-c", script)...)
	want := "hello pkg.stockade.test\nhello pkg.stockade.test\nhello plain.stockade.test\n"
	if r.Verdict != "ok" || r.Stdout != want {
		t.Fatalf("verdict %s, stdout %q, stderr %s", r.Verdict, r.Stdout, r.Stderr)
	}
	var tls, plain bool
	for _, d := range r.Network {
		if !d.Allowed {
			t.Errorf("refused: %+v", d)
		}
		tls = tls || d.Via == "CONNECT" && d.Host == "pkg.stockade.test" && d.Address == netUpAddr+":443" && d.BytesDown > 0
		plain = plain || d.Via == "GET" && d.Address == netUpAddr+":80"
	}
	if !tls || !plain {
		t.Fatalf("network %+v", r.Network)
	}

	// pip, from a simple index the upstream serves, into /work.
	work, err := os.MkdirTemp("", "stockade-pip-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(work)
	os.Chown(work, 1<<30+1, 1<<30+1)
	os.Chmod(work, 0o777)
	r = n.runJSON(append(args, "--timeout", "60s", "--workdir", work, "--",
		"python3", "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-d", "/work",
		"--index-url", "https://pkg.stockade.test/simple", "tinypkg")...)
	if r.Verdict != "ok" {
		t.Fatalf("pip download: %s\n%s\n%s", r.Verdict, r.Stdout, r.Stderr)
	}
	if _, err := os.Stat(filepath.Join(work, "tinypkg-1.0-py3-none-any.whl")); err != nil {
		t.Fatalf("pip did not download the wheel: %v\n%s", err, r.Stdout)
	}
}

// TestAttackNetRefusals tries every class the proxy must refuse, a direct
// connection that skips the proxy and a DNS query; each must be refused,
// reported, and (where the host side can see it) never arrive.
func TestAttackNetRefusals(t *testing.T) {
	n := newTestNet(t)
	n.serveUpstream()
	script := `
import socket, sys
def connect(target):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(b"CONNECT " + target + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    line = s.makefile("rb").readline().decode("latin-1").strip()
    s.close()
    return line
for t in sys.argv[1:]:
    print(t, "->", connect(t.encode().replace(b"\\0", b"\0")))
try:
    socket.create_connection(("` + netUpAddr + `", 8443), timeout=5)
    print("direct: connected")
except OSError as e:
    print("direct:", e.errno)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    u.sendto(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x03pkg\x00\x00\x01\x00\x01", ("` + netUpAddr + `", 53))
    print("udp: sent")
except OSError as e:
    print("udp:", e.errno)
try:
    socket.getaddrinfo("pkg.stockade.test", 443)
    print("dns: resolved")
except OSError as e:
    print("dns: failed")
`
	targets := []string{
		"loop.stockade.test:443", "meta.stockade.test:443", "ten.stockade.test:443", "v6loop.stockade.test:443",
		"mapped.stockade.test:443", "self.stockade.test:443", netUpAddr + ":443", "[" + netUpAddr6 + "]:443",
		"[::1]:443", "[::ffff:127.0.0.1]:443", "169.254.169.254:80", "pkg.stockade.test:8443",
		"pkg.stockade.test\\0.evil:443", "unlisted.stockade.test:443",
	}
	allow := "pkg.stockade.test,loop.stockade.test,meta.stockade.test,ten.stockade.test,v6loop.stockade.test,mapped.stockade.test,self.stockade.test"
	r := n.runJSON(append([]string{"--allow-net", allow, "--allow-private", "203.0.113.0/24", "--", "python3", "-c", script}, targets...)...)
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if len(lines) != len(targets)+3 {
		t.Fatalf("stdout %q\nstderr %s", r.Stdout, r.Stderr)
	}
	for i, target := range targets {
		if !strings.Contains(lines[i], "-> HTTP/1.1 4") {
			t.Errorf("CONNECT %s: %s", target, lines[i])
		}
	}
	tail := strings.Join(lines[len(targets):], "\n")
	if tail != "direct: 101\nudp: 101\ndns: failed" {
		t.Errorf("direct, UDP and DNS: %q (want ENETUNREACH, ENETUNREACH, failed)", tail)
	}
	wantReasons := map[string]string{
		"loop.stockade.test":     "loopback",
		"meta.stockade.test":     "cloud metadata",
		"ten.stockade.test":      "RFC 1918",
		"v6loop.stockade.test":   "loopback",
		"mapped.stockade.test":   "mapped",
		"self.stockade.test":     "this host",
		netUpAddr:                "IP address not in the allowlist",
		netUpAddr6:               "IP address not in the allowlist",
		"::1":                    "IP address",
		"169.254.169.254":        "IP address",
		"unlisted.stockade.test": "not in the allowlist",
	}
	seen := map[string]bool{}
	var direct, udp, dns, nul, port bool
	for _, d := range r.Network {
		if d.Allowed {
			t.Errorf("allowed: %+v", d)
		}
		if w, ok := wantReasons[d.Host]; ok && strings.Contains(d.Reason, w) {
			seen[d.Host] = true
		}
		direct = direct || d.Via == "connect" && d.Host == netUpAddr && d.Port == 8443
		udp = udp || d.Via == "sendto" && d.Port == 53
		dns = dns || d.Via == "dns"
		nul = nul || strings.Contains(d.Reason, "invalid host name")
		port = port || strings.Contains(d.Reason, "port 8443 is not allowed")
	}
	for h := range wantReasons {
		if !seen[h] {
			t.Errorf("no refusal of %s with %q in %+v", h, wantReasons[h], r.Network)
		}
	}
	if !direct || !udp || !dns || !nul || !port {
		t.Errorf("direct %v udp %v dns %v nul %v port %v: %+v", direct, udp, dns, nul, port, r.Network)
	}
	if a, u := n.upstreamAccept.Load(), n.udpSeen.Load(); a != 0 || u != 0 {
		t.Errorf("the upstream saw %d direct connections and %d datagrams", a, u)
	}

	// Without --json: one line per refusal on stderr.
	_, _, stderr := n.stockade("run", "--allow-net", allow, "--", "python3", "-c", script, "meta.stockade.test:443")
	if !strings.Contains(stderr, "stockade: network: refused CONNECT meta.stockade.test:443: meta.stockade.test resolves to 169.254.169.254: cloud metadata address (AWS, GCP, Azure") ||
		!strings.Contains(stderr, "stockade: network: refused connect "+netUpAddr+":8443: direct connection") {
		t.Errorf("stderr:\n%s", stderr)
	}
}

// TestNetNoNetworkSaysSoOnce: a jail without an allowlist that tries the
// network is told once, with the address, and the result lists it.
func TestNetNoNetworkSaysSoOnce(t *testing.T) {
	testenv.NeedJail(t)
	code, _, stderr := invoke(t, "", "run", "--", "python3", "-c", `
import socket
for _ in range(3):
    try: socket.create_connection(("93.184.216.34", 443), timeout=5)
    except OSError as e: pass
`)
	want := "stockade: network: this jail has no network (connect to 93.184.216.34:443 refused); see --allow-net\n"
	if code != 0 || stderr != want {
		t.Fatalf("exit %d, stderr %q, want %q", code, stderr, want)
	}
	_, out, _ := invoke(t, "", "run", "--json", "--", "python3", "-c", `
import socket
try: socket.getaddrinfo("pypi.org", 443)
except OSError as e: print(e.errno)
`)
	var r netResult
	if err := jsonUnmarshal(out, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Network) != 1 || r.Network[0].Via != "dns" || r.Network[0].Allowed {
		t.Fatalf("network %+v (stdout %q)", r.Network, r.Stdout)
	}
}

// TestNetEmptyAllowlistIsLoopbackOnly: no allowlist means no listener, no
// proxy variable, one interface and no route, exactly as before the proxy
// existed; an allowlist adds the proxy's listener on the jail's loopback
// and the variables, and nothing else.
func TestNetEmptyAllowlistIsLoopbackOnly(t *testing.T) {
	testenv.NeedJail(t)
	probe := `
import os
print(sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:]))
print(open("/proc/net/route").read().count("\n") - 1, open("/proc/net/ipv6_route").read().count("\n"))
print([l.split()[1] for l in open("/proc/net/tcp").readlines()[1:] if l.split()[3] == "0A"])
print(sorted(k for k in os.environ if "proxy" in k.lower()))
`
	_, without, _ := invoke(t, "", "run", "--", "python3", "-c", probe)
	// ipv6_route holds lo's own local and multicast routes: the same in both.
	v6 := strings.Split(without, "\n")[1]
	if without != "['lo']\n"+v6+"\n[]\n[]\n" || !strings.HasPrefix(v6, "0 ") {
		t.Fatalf("default jail: %q", without)
	}
	_, with, _ := invoke(t, "", "run", "--allow-net", "pypi.org", "--", "python3", "-c", probe)
	if with != "['lo']\n"+v6+"\n['0100007F:0C38']\n['HTTPS_PROXY', 'HTTP_PROXY', 'NO_PROXY', 'http_proxy', 'https_proxy', 'no_proxy']\n" {
		t.Fatalf("allowlisted jail: %q", with)
	}
}

// TestNetCapsEndAFlood: the download limit cuts a tunnel mid-stream and
// refuses new ones; the tunnel limit refuses connections past it.
func TestNetCapsEndAFlood(t *testing.T) {
	n := newTestNet(t)
	n.serveUpstream()
	args := append([]string{"--allow-net", "pkg.stockade.test", "--net-max-download", "2M", "--net-max-tunnels", "2"}, n.caArgs()...)
	// tunnels opens four tunnels at once, printing the proxy's status for each.
	const tunnels = `
import socket
held = []
for i in range(4):
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(b"CONNECT pkg.stockade.test:443 HTTP/1.1\r\n\r\n")
    held.append(s)
    print(s.makefile("rb").readline().split(b" ")[1].decode())
`
	script := `
import urllib.request
try:
    n = len(urllib.request.urlopen("https://pkg.stockade.test/big?n=67108864").read())
    print("read", n)
except Exception as e:
    print("cut")
` + tunnels
	r := n.runJSON(append(args, "--", "python3", "-c", script)...)
	if !strings.HasPrefix(r.Stdout, "cut\n") {
		t.Fatalf("the flood was not cut: %q %s", r.Stdout, r.Stderr)
	}
	var cut, refusedBytes, refusedTunnel bool
	var down int64
	for _, d := range r.Network {
		down += d.BytesDown
		cut = cut || strings.Contains(d.Cut, "download limit")
		refusedBytes = refusedBytes || strings.Contains(d.Reason, "download limit")
		refusedTunnel = refusedTunnel || strings.Contains(d.Reason, "tunnel limit")
	}
	if !cut || down > 2<<20 || !refusedBytes {
		t.Errorf("cut %v down %d refused after %v: %+v", cut, down, refusedBytes, r.Network)
	}
	// The byte limit is spent, so every later CONNECT is refused: run the
	// tunnel flood on its own budget.
	r = n.runJSON(append(args, "--", "python3", "-c", tunnels)...)
	if r.Stdout != "200\n200\n503\n503\n" {
		t.Errorf("tunnel flood: %q %s", r.Stdout, r.Stderr)
	}
	for _, d := range r.Network {
		refusedTunnel = refusedTunnel || strings.Contains(d.Reason, "tunnel limit")
	}
	if !refusedTunnel {
		t.Errorf("no tunnel-limit refusal: %+v", r.Network)
	}
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

// TestAttackSendtoAddressWithZeroLowHalf: the filter lets sendto through
// unobserved only when its address pointer is NULL on all 64 bits; a
// sockaddr placed at an address whose low 32 bits are zero must still be
// seen and reported.
func TestAttackSendtoAddressWithZeroLowHalf(t *testing.T) {
	testenv.NeedJail(t)
	code, out, stderr := invoke(t, "", "run", "--json", "--", "python3", "-c", `
import ctypes, socket, struct
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
want = 0x7e0000000000
p = libc.mmap(want, 4096, 3, 0x22 | 0x100000, -1, 0)  # MAP_PRIVATE|MAP_ANONYMOUS|MAP_FIXED_NOREPLACE
assert p == want, hex(p or 0)
sa = struct.pack("<HH4s8x", socket.AF_INET, socket.htons(53), socket.inet_aton("203.0.113.9"))
ctypes.memmove(p, sa, len(sa))
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
r = libc.sendto(s.fileno(), b"x", 1, 0, ctypes.c_void_p(p), 16)
print(r, ctypes.get_errno())
`)
	var r netResult
	if err := jsonUnmarshal(out, &r); err != nil {
		t.Fatalf("exit %d: %v %s", code, err, stderr)
	}
	if r.Stdout != "-1 101\n" {
		t.Fatalf("sendto: %q %s", r.Stdout, r.Stderr)
	}
	if len(r.Network) != 1 || r.Network[0].Via != "sendto" || r.Network[0].Host != "203.0.113.9" || r.Network[0].Port != 53 {
		t.Fatalf("network %+v", r.Network)
	}
}

// TestAttackNetMetadataThroughAllowPrivate: --allow-private 100.64.0.0/10
// opened Alibaba Cloud's metadata address 100.100.100.200 and fc00::/7 GCP's
// fd20:ce::254. Every documented metadata address (see netproxy/addrclass.go)
// is put on the upstream namespace, routed, and listened on; with every range
// holding one opened and CIDR rules listing all addresses, the jail asks for
// each by IP literal and by a listed name. None may be dialled; the
// neighbours 100.100.100.201 and fd20:ce::253, in the same opened ranges, are,
// which shows the canary would have seen the others.
func TestAttackNetMetadataThroughAllowPrivate(t *testing.T) {
	n := newTestNet(t)
	metadata := []string{"169.254.169.254", "169.254.170.2", "169.254.170.23", "169.254.0.23", "169.254.42.42",
		"168.63.129.16", "100.100.100.200", "192.0.0.192", "fd00:ec2::254", "fd00:ec2::23", "fd20:ce::254",
		"fd00:c1::a9fe:a9fe", "fd00:a9fe:a9fe::1", "fd00:42::42"}
	neighbours := []string{"100.100.100.201", "fd20:ce::253"}
	hosts, err := os.OpenFile(n.hostsFile, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	var targets, names []string
	for i, a := range append(append([]string{}, metadata...), neighbours...) {
		bits, v6 := "/32", strings.Contains(a, ":")
		var fam []string
		if v6 {
			bits, fam = "/128", []string{"-6"}
		}
		n.ip(n.upNS, append(fam, "addr", "add", a+bits, "dev", "stku")...)
		n.ip(n.hostNS, append(fam, "route", "add", a+bits, "dev", "stkh")...)
		name := fmt.Sprintf("meta%d.stockade.test", i)
		fmt.Fprintf(hosts, "%s %s\n", a, name)
		names = append(names, name)
		lit := a
		if v6 {
			lit = "[" + a + "]"
		}
		targets = append(targets, lit+":443", name+":443")
	}
	hosts.Close()
	var canary net.Listener
	if err := netnstest.In(n.upNS, func() (err error) { canary, err = net.Listen("tcp", ":443"); return err }); err != nil {
		t.Fatal(err)
	}
	defer canary.Close()
	var dialled atomic.Int64
	go func() {
		for {
			c, err := canary.Accept()
			if err != nil {
				return
			}
			dialled.Add(1)
			c.Close()
		}
	}()
	script := `
import socket, sys
for t in sys.argv[1:]:
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(b"CONNECT " + t.encode() + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    print(t, "->", s.makefile("rb").readline().decode("latin-1").strip())
    s.close()
`
	allow := "0.0.0.0/0,[::/0]:443," + strings.Join(names, ",")
	r := n.runJSON(append([]string{"--allow-net", allow, "--allow-private", "100.64.0.0/10,192.0.0.0/24,fc00::/7",
		"--", "python3", "-c", script}, targets...)...)
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if len(lines) != len(targets) {
		t.Fatalf("stdout %q\nstderr %s", r.Stdout, r.Stderr)
	}
	for i, line := range lines {
		if i < 2*len(metadata) {
			if !strings.Contains(line, "-> HTTP/1.1 403 ") || !strings.Contains(line, "cloud metadata") {
				t.Errorf("%s: want refused as cloud metadata", line)
			}
		} else if !strings.Contains(line, "-> HTTP/1.1 200 ") {
			t.Errorf("%s: the neighbour in an opened range was not reached: the canary proves nothing", line)
		}
	}
	if got, want := dialled.Load(), int64(2*len(neighbours)); got != want {
		t.Errorf("the upstream accepted %d connections, want %d (the neighbours' only)", got, want)
	}
	for _, d := range r.Network {
		host, _, _ := net.SplitHostPort(d.Address)
		if d.Allowed && host != neighbours[0] && host != neighbours[1] {
			t.Errorf("allowed: %+v", d)
		}
	}
}

// TestAttackSendmsgObserved: sendmsg went to the kernel unobserved (init
// needed it so), so a datagram sent with it to an outside address was in no
// report, where the same datagram by sendto was. It is observed as connect
// and sendto are: the outside destination is refused and listed, while
// datagrams to loopback and descriptors passed over a unix socket (as
// multiprocessing does) still work.
func TestAttackSendmsgObserved(t *testing.T) {
	testenv.NeedJail(t)
	code, out, stderr := invoke(t, "", "run", "--json", "--", "python3", "-c", `
import socket
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    u.sendmsg([b"x"], [], 0, ("203.0.113.9", 53))
    print("out: sent")
except OSError as e:
    print("out:", e.errno)
r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
r.bind(("127.0.0.1", 0))
u.sendmsg([b"y"], [], 0, r.getsockname())
print("loopback:", r.recv(1))
a, b = socket.socketpair()
socket.send_fds(a, [b"z"], [r.fileno()])
msg, fds, _, _ = socket.recv_fds(b, 1, 1)
print("fds:", msg, len(fds))
`)
	var r netResult
	if err := jsonUnmarshal(out, &r); err != nil {
		t.Fatalf("exit %d: %v %s", code, err, stderr)
	}
	if r.Stdout != "out: 101\nloopback: b'y'\nfds: b'z' 1\n" {
		t.Fatalf("stdout %q, stderr %s", r.Stdout, r.Stderr)
	}
	if len(r.Network) != 1 || r.Network[0].Via != "sendmsg" || r.Network[0].Host != "203.0.113.9" || r.Network[0].Port != 53 || r.Network[0].Allowed {
		t.Fatalf("network %+v", r.Network)
	}
}
