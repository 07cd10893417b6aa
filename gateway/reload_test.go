package gateway

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/proctest"
	"github.com/stockade/stockade/internal/testenv"
)

// servedCN is the subject CN of the certificate the gateway shows a new
// connection.
func servedCN(t *testing.T, tg *testGateway) string {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(tg.ca.Cert)
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 20 * time.Second}, "tcp", tg.addr, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName
}

// An operator renews the gateway's certificate and sends SIGHUP (the
// unit's ExecReload): the next connection gets the new one, without a
// restart. A reload with one bad file (a key that is not the
// certificate's) applies nothing of it: the certificate and the tenants
// loaded before both stay.
func TestReloadTakesRenewedCertificateAllOrNone(t *testing.T) {
	tg := startGateway(t, nil)
	if cn := servedCN(t, tg); cn != "gateway" {
		t.Fatalf("served %q before the renewal", cn)
	}
	cert, key := issue(t, tg.ca, "gateway-renewed", false)
	writeFile(t, tg.dir, "gw.crt", cert, 0o644)
	writeFile(t, tg.dir, "gw.key", key, 0o600)
	if err := tg.g.Reload(); err != nil {
		t.Fatal(err)
	}
	if cn := servedCN(t, tg); cn != "gateway-renewed" {
		t.Fatalf("served %q after the reload, want the renewed certificate", cn)
	}

	// Half a renewal: a new certificate with the old key, and a tenants
	// file without alice.
	cert3, _ := issue(t, tg.ca, "gateway-third", false)
	writeFile(t, tg.dir, "gw.crt", cert3, 0o644)
	writeFile(t, tg.dir, "tenants.toml", []byte(strings.Replace(testTenants, tokenAlice, strings.Repeat("d4", 20), 1)), 0o600)
	err := tg.g.Reload()
	if err == nil || !strings.Contains(err.Error(), "gw.crt") || !strings.Contains(err.Error(), "loaded before stay") {
		t.Fatalf("a reload with a key not the certificate's: %v", err)
	}
	if cn := servedCN(t, tg); cn != "gateway-renewed" {
		t.Fatalf("served %q after a failed reload, want the certificate before it", cn)
	}
	c := tg.client(t, nil)
	if code, _ := tg.do(t, c, "GET", "/v1/sessions", tokenAlice, "", nil); code != 200 {
		t.Fatalf("alice after a failed reload: %d, want 200 (the tenants before it)", code)
	}
}

// A SIGHUP that reaches `stockade gateway` while it dials the cluster
// (systemctl reload just after start) must not end it: Go's default for
// an unhandled SIGHUP is the process's end. Here the "cluster" accepts
// and never answers; the gateway gets SIGHUP then, and, the connection
// closed, ends with its own error, not the signal.
func TestGatewaySIGHUPWhileDiallingIsNoDeath(t *testing.T) {
	bin := testenv.NeedBinary(t, "the signal handling is the command's")
	tg := startGateway(t, nil) // its certificate and tenants files
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	clusterFile := writeFile(t, tg.dir, "cluster.json", []byte(`{"urls":["tls://`+l.Addr().String()+`"],"ca":"`+tg.g.cfg.ClientCAFile+`","user":"gateway","password":"pw"}`), 0o600)
	cmd := exec.Command(bin, "gateway", "--listen", "127.0.0.1:0", "--cert", tg.g.cfg.CertFile, "--key", tg.g.cfg.KeyFile,
		"--tenants", tg.g.cfg.TenantsFile, "--cluster", clusterFile, "--audit-log", filepath.Join(tg.dir, "audit.log"))
	var out proctest.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	p, err := proctest.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := l.Accept(); err == nil {
			accepted <- c
		}
	}()
	var conn net.Conn
	select {
	case conn = <-accepted:
	case <-p.Done():
		t.Fatalf("the gateway ended before it dialled:\n%s", out.String())
	case <-time.After(proctest.Budget(t, 30*time.Second)):
		t.Fatalf("the gateway never dialled the cluster:\n%s", out.String())
	}
	if err := p.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// The signal is delivered before the connection ends: a process it
	// kills is gone within this wait, one that handles it still dials.
	time.Sleep(200 * time.Millisecond)
	conn.Close()
	l.Close()
	o := p.Wait(proctest.Budget(t, 60*time.Second))
	if o.Expired {
		t.Fatalf("the gateway did not end after its cluster went away:\n%s", out.String())
	}
	var ee *exec.ExitError
	if errors.As(o.Err, &ee) {
		if ws := ee.Sys().(syscall.WaitStatus); ws.Signaled() {
			t.Fatalf("the gateway was ended by %v while it dialled the cluster:\n%s", ws.Signal(), out.String())
		}
	}
	if o.Code() != 125 || !strings.Contains(out.String(), "cluster") {
		t.Fatalf("exit %d, want 125 with the cluster's error:\n%s", o.Code(), out.String())
	}
}
