// Package jail runs one command in a fresh Linux jail and reports how it ended.
//
// The parent side (Run) owns every host resource of a run: the run directory,
// the cgroup, the pipes and the control socket. It holds a runlock slot for
// the whole run, recording the run directory and the cgroup before they are
// made, which is how every other stockade on the host knows they are in use
// and, once the slot's lock is free, that they are leftovers to remove. It starts a re-executed copy of
// the binary as pid 1 of new user, mount, pid, network, ipc and uts namespaces
// (the "init"), sends it the plan, and waits. The child side (ChildMain) is a
// straight line in the order the kernel requires: build the new root, pivot
// into it, drop every privilege on one locked thread, load seccomp there, and
// fork+exec the payload from that thread. Init then only reaps, and exits when
// the payload exits, which makes the kernel kill whatever the payload left
// behind in the pid namespace.
//
// Run is Prepare then Start: Prepare sets the jail up and starts its payload
// (for a server's warm pool, an interpreter blocked reading its program from
// the stdin pipe), Start starts the run's clock and waits, Close removes it
// all. A prepared jail is started once, never reused.
//
// Spec is plain data; a limit that ends a run is a Verdict in the Result, not
// an error. Run returns an error only when the jail itself could not be set up.
package jail
