package main

import (
	"archive/zip"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/certtest"
	"github.com/stockade/stockade/internal/clitest"
	"github.com/stockade/stockade/internal/netnstest"
	"github.com/stockade/stockade/internal/testenv"
)

// testNet is a small network of its own for the network tests: a "host"
// namespace where stockade runs (its proxy dials from there) and an
// "upstream" namespace holding the test servers, joined by a veth pair
// with documentation addresses (203.0.113.0/24, 2001:db8::/32). Nothing is
// routed anywhere else: no packet of these tests can leave the machine,
// and the machine's own namespaces are never touched.
type testNet struct {
	t              testing.TB
	hostNS, upNS   string // /proc/PID/ns/net of the holders
	holders        []*exec.Cmd
	dir            string // CA, hosts file; o+x so the jail user can reach a --ro bind
	hostsFile, ca  string
	upstreamAccept atomic.Int64 // connections the direct-connect canary accepted
	udpSeen        atomic.Int64 // datagrams the DNS canary received
}

const (
	netHostAddr = "203.0.113.1"
	netUpAddr   = "203.0.113.2"
	netUpAddr6  = "2001:db8::2"
)

func needNetns(t testing.TB) {
	t.Helper()
	testenv.NeedRoot(t, "creates network namespaces")
	for _, tool := range []string{"ip", "unshare", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (iproute2, util-linux)", tool)
		}
	}
}

func newTestNet(t testing.TB) *testNet {
	t.Helper()
	needNetns(t)
	n := &testNet{t: t}
	t.Cleanup(n.close)
	n.hostNS = n.holder()
	n.upNS = n.holder()
	upPid := strings.Split(n.upNS, "/")[2]
	n.ip(n.hostNS, "link", "add", "stkh", "type", "veth", "peer", "name", "stku", "netns", upPid)
	for _, c := range [][]string{
		{"link", "set", "lo", "up"},
		{"addr", "add", netHostAddr + "/24", "dev", "stkh"},
		{"-6", "addr", "add", "2001:db8::1/64", "dev", "stkh", "nodad"},
		{"link", "set", "stkh", "up"},
	} {
		n.ip(n.hostNS, c...)
	}
	for _, c := range [][]string{
		{"link", "set", "lo", "up"},
		{"addr", "add", netUpAddr + "/24", "dev", "stku"},
		{"-6", "addr", "add", netUpAddr6 + "/64", "dev", "stku", "nodad"},
		{"link", "set", "stku", "up"},
	} {
		n.ip(n.upNS, c...)
	}
	dir, err := os.MkdirTemp("", "stockade-nettest-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	n.dir = dir
	n.hostsFile = filepath.Join(dir, "hosts")
	hosts := strings.Join([]string{
		netUpAddr + " pkg.stockade.test plain.stockade.test other.stockade.test",
		netUpAddr6 + " six.pkg.stockade.test",
		"127.0.0.1 loop.stockade.test",
		"169.254.169.254 meta.stockade.test",
		"10.0.0.5 ten.stockade.test",
		"::1 v6loop.stockade.test",
		"::ffff:127.0.0.1 mapped.stockade.test",
		netHostAddr + " self.stockade.test",
	}, "\n") + "\n"
	if err := os.WriteFile(n.hostsFile, []byte(hosts), 0o644); err != nil {
		t.Fatal(err)
	}
	return n
}

// holder starts a process in a new network namespace and returns the
// namespace's path; the namespace lives as long as the process.
func (n *testNet) holder() string {
	cmd := exec.Command("unshare", "--net", "sleep", "600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	n.holders = append(n.holders, cmd)
	self, _ := os.Readlink("/proc/self/ns/net")
	p := fmt.Sprintf("/proc/%d/ns/net", cmd.Process.Pid)
	for i := 0; i < 200; i++ {
		if l, err := os.Readlink(p); err == nil && l != self {
			if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", cmd.Process.Pid)); strings.TrimSpace(string(comm)) == "sleep" {
				return p
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	n.t.Fatal("unshare --net did not start")
	return ""
}

func (n *testNet) ip(ns string, args ...string) {
	n.t.Helper()
	out, err := exec.Command("nsenter", append([]string{"--net=" + ns, "ip"}, args...)...).CombinedOutput()
	if err != nil {
		n.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func (n *testNet) close() {
	for _, h := range n.holders {
		_ = h.Process.Kill()
		_ = h.Wait()
	}
	if n.dir != "" {
		os.RemoveAll(n.dir)
	}
}

// serveUpstream starts the upstream's servers: HTTPS on 443 (v4 and v6)
// with a test CA, plain HTTP on 80, a TCP canary on 8443 that no direct
// connection may reach, and a UDP canary on 53.
func (n *testNet) serveUpstream() {
	t := n.t
	names := []string{"pkg.stockade.test", "plain.stockade.test", "six.pkg.stockade.test", "other.stockade.test"}
	ca := certtest.NewCA(t, "stockade test CA")
	cert := ca.Issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: names[0]}, DNSNames: names, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}).TLS
	n.ca = certtest.WriteFile(t, n.dir, "ca.pem", ca.PEM, 0o644)
	wheel := tinyWheel(t)
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s", r.Host)
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		size, _ := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		chunk := bytes.Repeat([]byte("z"), 256<<10)
		for size > 0 {
			k := min(size, int64(len(chunk)))
			if _, err := w.Write(chunk[:k]); err != nil {
				return
			}
			size -= k
		}
	})
	mux.HandleFunc("/simple/tinypkg/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<!DOCTYPE html><html><body><a href="/files/tinypkg-1.0-py3-none-any.whl">tinypkg-1.0-py3-none-any.whl</a></body></html>`)
	})
	mux.HandleFunc("/files/tinypkg-1.0-py3-none-any.whl", func(w http.ResponseWriter, r *http.Request) {
		w.Write(wheel)
	})
	listen := func(network, addr string) net.Listener {
		var ln net.Listener
		if err := netnstest.In(n.upNS, func() (err error) { ln, err = net.Listen(network, addr); return err }); err != nil {
			t.Fatalf("listen %s in the upstream namespace: %v", addr, err)
		}
		t.Cleanup(func() { ln.Close() })
		return ln
	}
	tlsCfg := &tls.Config{Certificates: []tls.Certificate{cert}}
	for _, a := range []string{netUpAddr + ":443", "[" + netUpAddr6 + "]:443"} {
		srv := &http.Server{Handler: mux, TLSConfig: tlsCfg, ErrorLog: quietLog()}
		go srv.ServeTLS(listen("tcp", a), "", "")
		t.Cleanup(func() { srv.Close() })
	}
	plain := &http.Server{Handler: mux, ErrorLog: quietLog()}
	go plain.Serve(listen("tcp", netUpAddr+":80"))
	t.Cleanup(func() { plain.Close() })
	canary := listen("tcp", netUpAddr+":8443")
	go func() {
		for {
			c, err := canary.Accept()
			if err != nil {
				return
			}
			n.upstreamAccept.Add(1)
			c.Close()
		}
	}()
	var udp net.PacketConn
	if err := netnstest.In(n.upNS, func() (err error) { udp, err = net.ListenPacket("udp", netUpAddr+":53"); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { udp.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := udp.ReadFrom(buf); err != nil {
				return
			}
			n.udpSeen.Add(1)
		}
	}()
}

// stockade runs the CLI (this test binary) inside the host namespace.
func (n *testNet) stockade(args ...string) (int, string, string) {
	n.t.Helper()
	cmd := exec.Command("nsenter", append([]string{"--net=" + n.hostNS, os.Args[0]}, args...)...)
	cmd.Env = append(os.Environ(), "STOCKADE_TEST_MAIN=1", "STOCKADE_NET_HOSTS="+n.hostsFile,
		"HTTPS_PROXY=", "https_proxy=")
	return clitest.RunExit(n.t, cmd)
}

// caArgs bind the test CA into the jail and point every client at it.
// The test addresses are documentation ranges, private unless opened, as
// an internal mirror's would be.
func (n *testNet) caArgs() []string {
	const in = "/etc/stockade-test-ca.pem"
	return []string{"--allow-private", "203.0.113.0/24,2001:db8::/32", "--ro", n.ca + ":" + in, "--env", "SSL_CERT_FILE=" + in, "--env", "REQUESTS_CA_BUNDLE=" + in, "--env", "PIP_CERT=" + in}
}

type netResult struct {
	Verdict  string `json:"verdict"`
	ExitCode int    `json:"exit_code"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	Network  []struct {
		Host      string `json:"host"`
		Port      int    `json:"port"`
		Address   string `json:"address"`
		Via       string `json:"via"`
		Allowed   bool   `json:"allowed"`
		Reason    string `json:"reason"`
		Count     int    `json:"count"`
		BytesUp   int64  `json:"bytes_up"`
		BytesDown int64  `json:"bytes_down"`
		Cut       string `json:"cut"`
	} `json:"network"`
}

func (n *testNet) runJSON(args ...string) netResult {
	n.t.Helper()
	code, out, errs := n.stockade(append([]string{"run", "--json"}, args...)...)
	var r netResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		n.t.Fatalf("exit %d, no JSON result: %v\nstdout: %s\nstderr: %s", code, err, out, errs)
	}
	return r
}

// tinyWheel is a valid pure-Python wheel, tinypkg 1.0.
func tinyWheel(t testing.TB) []byte {
	var b bytes.Buffer
	z := zip.NewWriter(&b)
	files := map[string]string{
		"tinypkg/__init__.py":                 "VALUE = 42\n",
		"tinypkg-1.0.dist-info/METADATA":      "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n",
		"tinypkg-1.0.dist-info/WHEEL":         "Wheel-Version: 1.0\nGenerator: stockade-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
		"tinypkg-1.0.dist-info/top_level.txt": "tinypkg\n",
	}
	var record strings.Builder
	for _, name := range []string{"tinypkg/__init__.py", "tinypkg-1.0.dist-info/METADATA", "tinypkg-1.0.dist-info/WHEEL", "tinypkg-1.0.dist-info/top_level.txt"} {
		w, err := z.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(files[name]))
		fmt.Fprintf(&record, "%s,,\n", name)
	}
	record.WriteString("tinypkg-1.0.dist-info/RECORD,,\n")
	w, _ := z.Create("tinypkg-1.0.dist-info/RECORD")
	w.Write([]byte(record.String()))
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
