package seccomp

import "github.com/stockade/stockade/seccomp/bpf"

// ErrNoNewPrivs is returned by Load when the calling thread has not set
// PR_SET_NO_NEW_PRIVS. Load does not set it itself: the jail's order is
// no_new_privs first, and a thread that skipped it has skipped a step.
var ErrNoNewPrivs = bpf.ErrNoNewPrivs

// Load compiles p and installs it on the calling OS thread only. See
// LoadProgram.
func Load(p *Policy) (notifyFD int, err error) {
	prog, err := Compile(p)
	if err != nil {
		return -1, err
	}
	return prog.Load()
}

// Load installs the program on the calling OS thread, which the caller has
// locked with runtime.LockOSThread and on which it has set no_new_privs, and
// returns the listener fd (O_CLOEXEC) that receives every refused call.
//
// It calls seccomp(2) itself rather than libseccomp's loader: libseccomp
// keeps the listener in process-global state (a second Load in the same
// process would get none) and could be configured for TSYNC, which would
// filter the Go runtime's other threads as well. Here the flags are exactly
// NEW_LISTENER (plus WAIT_KILLABLE_RECV when the kernel has it); without
// TSYNC only this thread and the threads and processes it creates afterwards
// carry the filter. The Go runtime creates new Ms of a locked thread from its
// template thread, so the process's other threads stay unfiltered.
//
// The filter cannot be removed: the thread and everything it forks keep it
// across execve, and the kernel runs every filter of a thread, the strictest
// answer winning, so later filters can only tighten.
func (prog *Program) Load() (notifyFD int, err error) {
	// The loader itself lives in seccomp/bpf, which has no cgo, so that the
	// jail's small static init can load the same way.
	return bpf.Load(prog.Policy, prog.filter)
}
