// Package bpf carries a compiled seccomp filter between processes and
// installs it, without libseccomp and without cgo: the jail's init, built
// as a small static binary, loads what the host side compiled.
package bpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Encode is the wire and file form of a filter: each instruction as code
// (16 bits), jt, jf (8 bits each), k (32 bits), little-endian.
func Encode(f []unix.SockFilter) []byte {
	b := make([]byte, 0, 8*len(f))
	for _, in := range f {
		b = binary.LittleEndian.AppendUint16(b, in.Code)
		b = append(b, in.Jt, in.Jf)
		b = binary.LittleEndian.AppendUint32(b, in.K)
	}
	return b
}

// Decode reverses Encode and refuses what the kernel would not load.
func Decode(b []byte) ([]unix.SockFilter, error) {
	if len(b)%8 != 0 || len(b) == 0 || len(b)/8 > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("seccomp: %d bytes is not a loadable BPF program", len(b))
	}
	f := make([]unix.SockFilter, len(b)/8)
	for i := range f {
		o := b[8*i:]
		f[i] = unix.SockFilter{Code: binary.LittleEndian.Uint16(o), Jt: o[2], Jf: o[3], K: binary.LittleEndian.Uint32(o[4:])}
	}
	return f, nil
}

// SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV (Linux 5.19): once the supervisor
// has read a notification, only a fatal signal interrupts the wait for its
// answer. Without it, the Go runtime's preemption signals and Python's
// SIGCHLD handlers restart a refused call and report it twice.
const filterFlagWaitKillableRecv = 0x20

// ErrNoNewPrivs is returned by Load when the calling thread has not set
// PR_SET_NO_NEW_PRIVS: the jail's order is no_new_privs first.
var ErrNoNewPrivs = errors.New("seccomp: no_new_privs is not set on this thread (prctl(PR_SET_NO_NEW_PRIVS, 1) must come before the filter)")

// Load installs filter on the calling OS thread only (the caller has locked
// it and set no_new_privs; no TSYNC, so the process's other threads stay
// unfiltered) and returns the listener fd (O_CLOEXEC) that receives every
// call the filter refers to user space. policy names it in errors.
func Load(policy string, filter []unix.SockFilter) (notifyFD int, err error) {
	if len(filter) == 0 {
		return -1, fmt.Errorf("seccomp policy %q: empty filter", policy)
	}
	nnp, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
	if err != nil {
		return -1, fmt.Errorf("seccomp: read no_new_privs: %w", err)
	}
	if nnp != 1 {
		return -1, ErrNoNewPrivs
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	flags := uintptr(unix.SECCOMP_FILTER_FLAG_NEW_LISTENER | filterFlagWaitKillableRecv)
	for {
		//stockade:no-cloexec the kernel opens the listener O_CLOEXEC (seccomp_set_mode_filter's get_unused_fd_flags)
		fd, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&prog)))
		switch {
		case errno == 0:
			return int(fd), nil
		case errno == unix.EINVAL && flags&filterFlagWaitKillableRecv != 0:
			flags &^= filterFlagWaitKillableRecv // a kernel older than 5.19
		case errno == unix.EBUSY:
			return -1, fmt.Errorf("seccomp policy %q: the kernel refused a listener (EBUSY): a filter with a listener is already installed on this thread, from a container runtime or an enclosing stockade", policy)
		default:
			return -1, fmt.Errorf("seccomp policy %q: install filter of %d instructions: %w", policy, len(filter), errno)
		}
	}
}
