// Package certtest is test support only: a certificate authority made for
// one test and the certificates it signs (the gateway's TLS and client
// certificates, the cluster's NATS servers, the network tests' upstream,
// the Go client's HTTPS), each a P-256 key, valid from an hour before now
// for a day.
package certtest
