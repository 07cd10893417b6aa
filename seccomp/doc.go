// Package seccomp holds stockade's system-call policies and installs them.
//
// A Policy is data: which system calls a jailed Python program may make, the
// argument rules for the few calls whose danger lies in an argument (socket
// families, clone namespace flags, ioctl requests, prctl options, personas),
// and which known calls are refused. The built-in policies live in
// policies.go; Lookup returns them by name.
//
// Load compiles a policy with libseccomp into classic BPF and installs it on
// the calling OS thread only, with SECCOMP_FILTER_FLAG_NEW_LISTENER. Every call
// the policy refuses becomes a user notification on the returned listener fd; a
// Supervisor, run by the host-side parent outside the jail, answers each one
// with EPERM (never "continue") and records it for the run's report. System
// calls the policy does not know at all (newer than it) fail with ENOSYS
// without a notification so that libc falls back, and system calls of another
// ABI (i386, x32) kill the process.
//
// The order the caller must keep: PR_SET_NO_NEW_PRIVS, then Load on a thread
// locked with runtime.LockOSThread, then send the listener fd to the parent
// and close it, then fork and exec the payload from that same thread.
package seccomp
