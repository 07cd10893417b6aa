// Package e2e holds the end-to-end tests that only run the built stockade
// binary as a process (make build's bin/stockade, through $STOCKADE_BIN),
// as a user, a container runtime or a shell would: nothing of package
// main's insides. The tests that call the command line in-process, or run
// their own test binary as stockade, stay in cmd/stockade.
package e2e
