package gateway

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"strings"
	"testing"
	"time"
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
