// Package netnstest is test support only: the tests that build network
// namespaces of their own (the command's network tests, the cluster's
// hosts) make their sockets in them through In, on a thread that joined
// the namespace and never serves another goroutine from it.
package netnstest
