package jailinit

import (
	"errors"
	"os"
	"runtime"
	"unsafe"

	"github.com/stockade/stockade/internal/fds"
	"github.com/stockade/stockade/internal/loopback"
	"golang.org/x/sys/unix"
)

// Arg0 is the argv[0] of a jail's init; with fd 3 a socket, it
// marks a process as a jail's init.
const Arg0 = "jailinit"

// ctlFD is init's end of the control socket.
const ctlFD = 3

// IsInit reports whether this process is a jail's init: started with
// argv[0] Arg0 and a SOCK_SEQPACKET socket at fd 3, as pid 1. Argv and
// descriptors are whatever the caller of execve chose, so they alone would
// let anyone who can start a program importing package jail (a setuid or
// file-capability helper built on it) make it skip its main and run init's
// mounts and pivot_root with its privileges, from a config the caller
// writes. Pid 1 is what only Run arranges: init is the first process of
// the pid namespace it clones, and making one takes CAP_SYS_ADMIN in a
// user namespace, where a set-id or file-capability exec grants nothing
// (the file's owner and root id are not mapped there).
func IsInit() bool {
	if len(os.Args) != 1 || os.Args[0] != Arg0 || os.Getpid() != 1 {
		return false
	}
	t, err := unix.GetsockoptInt(ctlFD, unix.SOL_SOCKET, unix.SO_TYPE)
	return err == nil && t == unix.SOCK_SEQPACKET
}

// Main is init: it builds the jail from the parent's plan, starts the
// payload, reaps, and exits with the payload. It never returns.
func Main() {
	// When init's own code began, for the phase trace: one clock read,
	// kept only if the parent asks.
	begun := MonoNow()
	// The payload is forked from this thread after this thread alone has
	// become the jail user, so the goroutine must never move.
	runtime.LockOSThread()
	unix.CloseOnExec(ctlFD)
	// Run from a memfd, the kernel names us after its fd number; say
	// what we are in the host's ps.
	_ = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&[]byte(Arg0 + "\x00")[0])), 0, 0, 0)
	if err := defaultSignals(); err != nil {
		fail("protect init from forged faults", err, ExitJailError)
	}

	cfg, err := readConfig()
	if err != nil {
		fail("read config", err, ExitJailError)
	}
	if err := markPassed(cfg.PassFDs); err != nil {
		fail("read config", err, ExitJailError)
	}
	tr := newTrace(cfg.Phases, begun)
	tr.mark("config read")
	pid, err := contain(cfg, tr)
	if err != nil {
		var se *SetupError
		if errors.As(err, &se) {
			send(Msg{Kind: MsgError, Step: se.Step, Message: se.Message, ExitCode: se.ExitCode})
			os.Exit(se.ExitCode)
		}
		fail("", err, ExitJailError)
	}
	reap(pid, tr)
}

// contain is the jail's setup, one step per line in the order the kernel
// requires, through the payload's exec: what init inherited closed before
// anything else, the cgroup namespace after the parent placed us in the
// cgroup, mounts while still privileged, pivot_root, then identity and
// limits, the command looked up while init can still read everything, the
// privilege drop, descriptors marked for the exec, seccomp last, and the
// payload forked from this thread. It returns the payload's pid.
func contain(cfg *Config, tr *trace) (int, error) {
	var argv0 string
	var pid int
	for _, s := range containSteps(cfg, &argv0, &pid) {
		tr.mark(s.name)
		if err := s.fn(); err != nil {
			var se *SetupError
			if errors.As(err, &se) {
				return 0, se // carries its own step and exit status (126, 127)
			}
			return 0, &SetupError{Step: s.name, Message: err.Error(), ExitCode: ExitJailError}
		}
	}
	tr.mark("payload started")
	send(Msg{Kind: MsgStarted, Phases: tr.take()})
	return pid, nil
}

// step is one line of the containment sequence.
type step struct {
	name string
	fn   func() error
}

// containSteps is the containment sequence. lookPath stores the command's
// path in argv0 and the exec step the payload's pid in pid.
func containSteps(c *Config, argv0 *string, pid *int) []step {
	return []step{
		// First: a descriptor the caller of stockade left open without
		// close-on-exec (a shell's exec 7</, systemd's journal stream, a
		// flock wrapper's lock) was inherited by init across its execve.
		// Everything above the control socket that lacks the flag is that;
		// the descriptors the parent passed on purpose (Config.PassFDs)
		// were given the flag as the config arrived, and stay.
		{"close inherited descriptors", func() error { return fds.CloseInherited(ctlFD + 1) }},
		{"protect init", protectInit},
		{"make mounts private", func() error { return unix.Mount("", "/", "", unix.MS_SLAVE|unix.MS_REC, "") }},
		{"build root", func() error { return buildRoot(c.NewRoot, c.Steps) }},
		{"pivot_root", func() error { return pivotInto(c.NewRoot) }},
		{"set hostname", func() error { return unix.Sethostname([]byte(c.Hostname)) }},
		{"bring up loopback", loopback.Up},
		{"open the proxy's listener", func() error { return openProxyListener(c) }},
		{"chdir /work", func() error { return unix.Chdir("/work") }},
		{"set rlimits", func() error { return setRlimits(c) }},
		{"set CPU affinity", func() error { return setAffinity(c) }},
		{"wait for cgroup placement", func() error { return waitPlacement(c) }},
		// After placement: a cgroup namespace is rooted where its creator
		// stands when it is made, so the jail sees its own cgroup as /.
		{"unshare cgroup namespace", func() error { return unix.Unshare(unix.CLONE_NEWCGROUP) }},
		{"unshare time namespace", func() error { return unshareTime(c.TimeNSUsable) }},
		// It also forbids new namespaces, init's own included.
		{"limit per-user kernel objects", limitUserCounts},
		{"find command", func() (err error) { *argv0, err = lookPath(c.Args[0], c.Path); return err }},
		// From here this thread is the jail user with nothing left, and
		// only this thread: the payload must be forked from it.
		{"drop privileges", func() error { return becomeJailUser(c.SetGroups) }},
		// The payload gets 0-2, and the descriptors passed on purpose where
		// startPayload places them (3, 4, ...), and nothing else: every other descriptor
		// init holds (the control socket, Go's own, any a step opened) is
		// closed by the payload's execve. Read back before the filter,
		// which may refuse close_range or reading /proc; after this only
		// the filter's listener is opened, close-on-exec by the kernel.
		{"close descriptors above 2 on exec", func() error { return fds.CloseOnExecFrom(3) }},
		// Last before exec: the filter applies to init's thread too, and it
		// needs nothing more than fork and exec.
		{"load seccomp", func() error { return loadSeccomp(c.Seccomp, c.SeccompBPF) }},
		{"exec", func() (err error) { *pid, err = startPayload(*argv0, c); return err }},
	}
}

// ContainStepNames are the names of the containment sequence's steps in
// order, as init's phase marks carry them ("init: " and the name).
func ContainStepNames() []string {
	var names []string
	for _, s := range containSteps(&Config{}, new(string), new(int)) {
		names = append(names, s.name)
	}
	return names
}
