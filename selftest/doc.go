// Package selftest is stockade's escape suite: small Python programs, each
// trying one way out of the jail, run one per jail under a caller's base
// Spec, with the host-side fixtures they aim at (a loopback listener, unix
// sockets, a canary file and environment variable, a pty) and the host-side
// checks that the jail's own report cannot vouch for (no survivor, no
// leftover cgroup, mount or run directory, nothing injected into the pty,
// no sibling run's sweep naming a live run).
//
// Every attack prints a last line starting HELD or OPEN; the suite trusts
// that line only as far as the host can confirm it, and for the resource
// attacks it is the run's Verdict that counts. A row passes when the door
// held. The suite is meant to fail loudly: a base Spec with seccomp off, no
// cgroup, or /etc/shadow bound in turns rows to FAIL (see the tests).
//
// Attacks are bounded so that an open door cannot harm the host: a fork bomb
// stops itself at a few hundred children, a memory bomb at 1 GiB, a spin at
// a few seconds, and every raw system call is made with invalid arguments.
package selftest
