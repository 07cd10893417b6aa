package gateway

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// tlsConfig is the gateway's TLS: its certificate and key (required: the
// gateway has no plain listener to fall back to), TLS 1.2 at least (1.3
// preferred, Go's default when both sides have it), and, given a client
// CA, client certificates: asked for, and verified against that CA when
// sent. A caller without one may still come with a token; a certificate
// that does not verify ends the handshake.
func tlsConfig(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("--cert and --key are required (the gateway serves HTTPS only, never plain TCP)")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("certificate %s and key %s: %w", certFile, keyFile, err)
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"http/1.1"},
	}
	if clientCAFile != "" {
		pem, err := os.ReadFile(clientCAFile)
		if err != nil {
			return nil, fmt.Errorf("client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("client CA %s: no PEM certificate in it", clientCAFile)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return cfg, nil
}

// certNames are the names a verified client certificate may be a tenant
// by: its DNS, email and URI SANs; its subject's CN only when it has no
// SAN at all and no CA of its chain is name-constrained. A CA's name
// constraints bind SANs, never the CN (RFC 5280; Go checks SANs only):
// a CN beside SANs, or under a constrained CA, is a name nobody checked,
// and a delegated CA could write any tenant's name there.
func certNames(chain []*x509.Certificate) []string {
	c := chain[0]
	var names []string
	names = append(names, c.DNSNames...)
	names = append(names, c.EmailAddresses...)
	for _, u := range c.URIs {
		names = append(names, u.String())
	}
	if len(names) == 0 && len(c.IPAddresses) == 0 && c.Subject.CommonName != "" && !nameConstrained(chain[1:]) {
		names = append(names, c.Subject.CommonName)
	}
	return names
}

// nameConstrained says whether any of cas limits the names it may issue.
func nameConstrained(cas []*x509.Certificate) bool {
	for _, ca := range cas {
		if len(ca.PermittedDNSDomains)+len(ca.ExcludedDNSDomains)+len(ca.PermittedIPRanges)+len(ca.ExcludedIPRanges)+
			len(ca.PermittedEmailAddresses)+len(ca.ExcludedEmailAddresses)+len(ca.PermittedURIDomains)+len(ca.ExcludedURIDomains) > 0 {
			return true
		}
	}
	return false
}
