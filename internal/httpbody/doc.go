// Package httpbody is the one way a request's body is read whole: into a
// slice of its own size (a body of unknown length in chunks, joined once),
// never more than a bound, and within a deadline on the connection. The
// server, the gateway and the cluster's backend read theirs through it;
// each says the failures in its own words (ErrTooLarge for the bound, the
// reader's own error for the rest, a net.Error Timeout at the deadline).
package httpbody
