// Package proctest reads the host's process table for tests that assert on
// what a run left behind: a jail's processes must be gone when its run
// returns, so several packages' tests list the live children of a process.
// It is test support only; nothing outside tests imports it.
package proctest
