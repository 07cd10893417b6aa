// Package server is `stockade serve`: a local HTTP/1.1 + JSON server on a
// unix socket that runs each request in a fresh jail, taken from a warm
// pool of jails prepared ahead of time (jail.Prepare) and never reused.
//
// A request's program and files reach the jail as a `run` job on the
// channel of the driver the jail's interpreter is already running
// (server/internal/kernel), its stdin on the jail's stdin: that is what
// lets the jail, the interpreter and its limits exist before the code
// arrives; a session is the same driver given a `session` job. What the run
// left in /work is read back on the host without following a symlink the
// jail may have planted (files_linux.go).
package server
