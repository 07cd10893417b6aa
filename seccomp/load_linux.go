package seccomp

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV (Linux 5.19): once the supervisor
// has read a notification, only a fatal signal interrupts the wait for its
// answer. Without it, the Go runtime's preemption signals and Python's
// SIGCHLD handlers restart a refused call and report it twice.
const filterFlagWaitKillableRecv = 0x20

// ErrNoNewPrivs is returned by Load when the calling thread has not set
// PR_SET_NO_NEW_PRIVS. Load does not set it itself: the jail's order is
// no_new_privs first, and a thread that skipped it has skipped a step.
var ErrNoNewPrivs = errors.New("seccomp: no_new_privs is not set on this thread (prctl(PR_SET_NO_NEW_PRIVS, 1) must come before Load)")

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
	nnp, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
	if err != nil {
		return -1, fmt.Errorf("seccomp: read no_new_privs: %w", err)
	}
	if nnp != 1 {
		return -1, ErrNoNewPrivs
	}
	fprog := unix.SockFprog{Len: uint16(len(prog.filter)), Filter: &prog.filter[0]}
	flags := uintptr(unix.SECCOMP_FILTER_FLAG_NEW_LISTENER | filterFlagWaitKillableRecv)
	for {
		fd, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&fprog)))
		switch {
		case errno == 0:
			return int(fd), nil
		case errno == unix.EINVAL && flags&filterFlagWaitKillableRecv != 0:
			flags &^= filterFlagWaitKillableRecv // a kernel older than 5.19
		case errno == unix.EBUSY:
			return -1, fmt.Errorf("seccomp policy %q: the kernel refused a listener (EBUSY): a filter with a listener is already installed on this thread, from a container runtime or an enclosing stockade", prog.Policy)
		default:
			return -1, fmt.Errorf("seccomp policy %q: install filter of %d instructions: %w", prog.Policy, len(prog.filter), errno)
		}
	}
}
