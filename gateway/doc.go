// Package gateway is `stockade gateway`: the /v1 API over HTTPS for callers
// on other machines, in front of a Backend (the cluster's, package cluster)
// that runs the work on `stockade serve --cluster` nodes.
//
// The gateway authenticates each request (a bearer token from the tenants
// file, or a client certificate verified against a CA), names its tenant,
// applies the tenant's policy the way the server applies its profile (the
// profiles a tenant may use, its limit caps laid over the request's limits
// tighten-only by profiles.Tighten), bounds the body and the
// Idempotency-Key, writes one audit line, and hands the request to the
// Backend with the tenant, which takes the place the peer uid has on the
// unix socket. It keeps no state of its own: run two or more behind any
// TCP load balancer. It never listens without TLS.
package gateway
