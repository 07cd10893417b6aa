package gateway

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/certtest"
)

// constrainedSubCA is a CA the test CA delegated to, allowed by X.509
// name constraints to name hosts under permitted only: the standard way
// to let a team issue its own client certificates.
func constrainedSubCA(t *testing.T, ca *certtest.CA, permitted string) *certtest.CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "team CA for " + permitted},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
		PermittedDNSDomainsCritical: true, PermittedDNSDomains: []string{permitted},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &certtest.CA{Cert: cert, Key: key}
}

// TestAttackCertCommonNameOverSAN: name constraints bind a certificate's
// SANs, never its subject CN (Go checks them on SANs only, as RFC 5280
// has it). A team whose delegated CA may only name hosts under
// team-b.test issues itself a certificate with its own name in the SAN
// and alice's in the CN, or alice's in the CN and no SAN at all: the
// chain verifies, and a gateway that reads the CN takes it for alice.
// A CN beside SANs counts for nothing, whoever issued it.
func TestAttackCertCommonNameOverSAN(t *testing.T) {
	tg := startGateway(t, nil)
	sub := constrainedSubCA(t, tg.ca, "team-b.test")
	for _, tc := range []struct {
		name string
		ca   *certtest.CA
		cn   string
		sans []string
	}{
		{"alice's CN beside the team's own SAN", sub, "alice.clients.test", []string{"worker.team-b.test"}},
		{"alice's CN and no SAN", sub, "alice.clients.test", nil},
		// An issuer that checks what it puts in SANs (ACME, SPIFFE) and
		// copies a requested CN: the SANs are the names it vouches for,
		// as Go's own hostname check has held since 1.15.
		{"alice's CN beside another SAN, from the root", tg.ca, "alice.clients.test", []string{"worker.team-b.test"}},
	} {
		certPEM, keyPEM := issue(t, tc.ca, tc.cn, true, tc.sans...)
		leaf, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		if tc.ca != tg.ca {
			leaf.Certificate = append(leaf.Certificate, tc.ca.Cert.Raw)
		}
		before := tg.backend.callCount()
		code, body := tg.do(t, tg.client(t, &leaf), "GET", "/v1/sessions", "", "", nil)
		if tg.backend.callCount() != before {
			t.Errorf("%s: came through as tenant %q (%d %s)", tc.name, tg.backend.last().tenant, code, body)
		} else if code != 401 {
			t.Errorf("%s: %d %s, want 401", tc.name, code, body)
		}
	}
}
