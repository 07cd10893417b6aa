package certtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority made for one test.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	PEM  []byte // Cert, PEM-encoded
}

// NewCA makes a CA whose certificate names it name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Issue signs a certificate with a new key for tmpl's names and uses
// (its subject, DNSNames, IPAddresses, ExtKeyUsage, any constraints); the
// serial number, the validity and the key usage are the CA's to fill in
// when tmpl leaves them out.
func (ca *CA) Issue(t testing.TB, tmpl *x509.Certificate) *Leaf {
	t.Helper()
	key := newKey(t)
	c := *tmpl
	if c.SerialNumber == nil {
		c.SerialNumber, _ = rand.Int(rand.Reader, big.NewInt(1<<62))
	}
	if c.NotBefore.IsZero() {
		c.NotBefore, c.NotAfter = ca.Cert.NotBefore, ca.Cert.NotAfter
	}
	if c.KeyUsage == 0 {
		c.KeyUsage = x509.KeyUsageDigitalSignature
	}
	der, err := x509.CreateCertificate(rand.Reader, &c, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return &Leaf{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}),
		TLS:     tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
	}
}

// Pool is a pool holding the CA alone, for a client or server that
// verifies what it signed.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Leaf is a certificate a CA signed and its key.
type Leaf struct {
	CertPEM, KeyPEM []byte
	TLS             tls.Certificate // for a server or client in the test's process
}

// WriteFile writes b to dir/name with mode and returns its path.
func WriteFile(t testing.TB, dir, name string, b []byte, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // past the umask
		t.Fatal(err)
	}
	return p
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}
