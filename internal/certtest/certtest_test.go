package certtest

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"testing"
)

// A leaf the CA signed verifies against its pool for the names and use
// it was made for, and not for another name or use; its PEM pair and
// its tls.Certificate are the same certificate.
func TestIssue(t *testing.T) {
	ca := NewCA(t, "test CA")
	leaf := ca.Issue(t, &x509.Certificate{DNSNames: []string{"a.test"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	pair, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if string(pair.Certificate[0]) != string(leaf.TLS.Certificate[0]) {
		t.Fatal("the PEM pair and the tls.Certificate differ")
	}
	cert, _ := x509.ParseCertificate(leaf.TLS.Certificate[0])
	server := x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	for _, name := range []string{"a.test", "127.0.0.1"} {
		server.DNSName = name
		if _, err := cert.Verify(server); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	server.DNSName = "b.test"
	if _, err := cert.Verify(server); err == nil {
		t.Error("verified for a name it was not made for")
	}
	client := x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if _, err := cert.Verify(client); err == nil {
		t.Error("a server's certificate verified as a client's")
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: NewCA(t, "other CA").Pool(), DNSName: "a.test"}); err == nil {
		t.Error("verified against another CA")
	}
}
