// Package proctest reads the host's process table for tests that assert on
// what a run left behind: a jail's processes must be gone when its run
// returns, so several packages' tests list the live children of a process.
// It also holds the refused-call loop that the jail and server packages'
// attacks on the supervisor's CPU budget run. It is test support only;
// nothing outside tests imports it.
package proctest
