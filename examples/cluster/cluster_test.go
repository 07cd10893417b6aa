// Package clusterexample holds the three-host set-up of docs/cluster.md
// on bare servers (nats.conf, the systemd units, the cluster files) and
// the test that checks them; nothing imports it.
package clusterexample

import (
	"bufio"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stockade/stockade/cluster"
	"github.com/stockade/stockade/internal/certtest"
	"github.com/stockade/stockade/internal/clitest"
)

// unit reads a systemd unit: its sections' keys and values (a key given
// twice keeps the last), refusing a line that is neither.
func unit(t *testing.T, path string) map[string]map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := map[string]map[string]string{}
	var sec map[string]string
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			sec = map[string]string{}
			u[line[1:len(line)-1]] = sec
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || sec == nil || k == "" {
				t.Fatalf("%s:%d: not a unit's line: %q", path, n, line)
			}
			sec[k] = v
		}
	}
	for _, s := range []string{"Unit", "Service", "Install"} {
		if u[s] == nil {
			t.Fatalf("%s: no [%s]", path, s)
		}
	}
	return u
}

// The stockade units run flags the built binary has, with the files the
// set-up names; the NATS unit runs nats.conf with the passwords it reads.
func TestUnitsUseFlagsTheBinaryHas(t *testing.T) {
	for file, sub := range map[string]string{"stockade-node.service": "serve", "stockade-gateway.service": "gateway"} {
		argv := strings.Fields(unit(t, file)["Service"]["ExecStart"])
		if len(argv) < 3 || argv[0] != "/usr/local/bin/stockade" || argv[1] != sub {
			t.Fatalf("%s: ExecStart %v", file, argv)
		}
		flags := clitest.HelpFlags(t, sub)
		given := map[string]string{}
		for i := 2; i < len(argv); i++ {
			f, ok := strings.CutPrefix(argv[i], "--")
			if !ok || !flags[f] || i+1 == len(argv) {
				t.Fatalf("%s: %q is not a flag of stockade %s with its value", file, argv[i], sub)
			}
			given[f] = argv[i+1]
			i++
		}
		if given["cluster"] == "" {
			t.Errorf("%s: no --cluster", file)
		}
	}
	if !strings.Contains(unit(t, "nats-server.service")["Service"]["ExecStart"], "/etc/nats/nats.conf") {
		t.Error("nats-server.service does not run /etc/nats/nats.conf")
	}
}

// The cluster files pass the cluster package's strict reading.
func TestClusterFilesLoad(t *testing.T) {
	if c, err := cluster.Load("cluster-node.json", true); err != nil || c.Node != "h1" || c.User != "h1" {
		t.Errorf("cluster-node.json: %+v %v", c, err)
	}
	if c, err := cluster.Load("cluster-gateway.json", false); err != nil || c.User != "gateway" {
		t.Errorf("cluster-gateway.json: %+v %v", c, err)
	}
}

// nats.conf as the real nats-server reads it (-t: check the file and
// exit), with a certificate made here where /etc/nats's would be: it
// parses, takes the passwords from the environment, and without them it
// is refused (so the check is a real one).
func TestNATSConfParses(t *testing.T) {
	natsBin := os.Getenv("STOCKADE_NATS_SERVER")
	if natsBin == "" {
		t.Skip("set STOCKADE_NATS_SERVER to a nats-server (make test installs one into build/nats)")
	}
	dir := t.TempDir()
	writeCert(t, dir)
	b, err := os.ReadFile("nats.conf")
	if err != nil {
		t.Fatal(err)
	}
	// The host's addresses become loopback, the files this test's.
	conf := strings.NewReplacer("/etc/nats/", dir+"/", "/var/lib/nats", filepath.Join(dir, "js"),
		"10.0.0.11", "127.0.0.1", "10.0.0.12", "127.0.0.2", "10.0.0.13", "127.0.0.3").Replace(string(b))
	path := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	check := func(env []string) (string, error) {
		cmd := exec.Command(natsBin, "-c", path, "-t")
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	env := []string{"GATEWAY_PASSWORD=pw-g", "H1_PASSWORD=pw-1", "H2_PASSWORD=pw-2", "H3_PASSWORD=pw-3"}
	if out, err := check(env); err != nil {
		t.Fatalf("nats-server -t: %v\n%s", err, out)
	}
	if out, err := check(env[1:]); err == nil || !strings.Contains(out, "GATEWAY_PASSWORD") {
		t.Fatalf("nats-server -t without GATEWAY_PASSWORD: %v\n%s", err, out)
	}
}

// writeCert writes ca.pem and h1.pem, h1-key.pem (a certificate for
// 127.0.0.1 the CA signed) into dir.
func writeCert(t *testing.T, dir string) {
	t.Helper()
	ca := certtest.NewCA(t, "test CA")
	h1 := ca.Issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "h1"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}})
	certtest.WriteFile(t, dir, "ca.pem", ca.PEM, 0o600)
	certtest.WriteFile(t, dir, "h1.pem", h1.CertPEM, 0o600)
	certtest.WriteFile(t, dir, "h1-key.pem", h1.KeyPEM, 0o600)
}
