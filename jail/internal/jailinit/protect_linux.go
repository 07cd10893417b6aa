package jailinit

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// protectInit makes init non-dumpable: its /proc entries become
// inaccessible to the payload, which runs as another uid with no
// capabilities, so it can neither read init's memory nor open /proc/1/exe
// (the path back to the stockade binary on the host, CVE-2019-5736).
func protectInit() error {
	return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
}

// payloadSignals are the signals a payload could send init (it runs as
// the uid of init's main thread, so the kernel lets it signal init), each
// of which Go's runtime would act on itself: SIGHUP, SIGINT, SIGTERM and
// the like exit, SIGQUIT and SIGABRT crash with a stack trace, and
// SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS and SIGSTKFLT crash
// unless their si_code says kill() or tgkill() sent them (sigqueue's
// SI_QUEUE, or F_SETSIG's POLL_IN on a descriptor whose owner is init),
// whatever signal.Notify says. Any of them took init down, and turned the
// run into a setup error.
var payloadSignals = []unix.Signal{
	unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2,
	unix.SIGPIPE, unix.SIGTTIN, unix.SIGTTOU, unix.SIGTSTP, unix.SIGABRT, unix.SIGALRM,
	unix.SIGVTALRM, unix.SIGPROF, unix.SIGXCPU, unix.SIGXFSZ, unix.SIGPWR, unix.SIGIO,
	unix.SIGSEGV, unix.SIGBUS, unix.SIGFPE, unix.SIGILL, unix.SIGTRAP, unix.SIGSYS, unix.SIGSTKFLT,
}

// defaultSignals gives payloadSignals their default action, bypassing Go's
// handlers (the runtime offers no way to), and reads each back. The kernel
// drops a signal sent to a pid namespace's init while its action is the
// default, whatever the si_code, from inside the namespace or from the host
// (only SIGKILL and SIGSTOP from the host get through), so the payload can
// neither kill init nor make it crash. A real fault in init is forced
// through and still kills it, as Go's handler would have. Unlike an ignored
// signal, a default one stays default across execve: the payload starts with
// every signal at its default (Python's KeyboardInterrupt works).
//
// It replaces a signal.Notify of the same signals into a channel nobody
// read, which cost 1-2 ms of every run: the runtime enables each notified
// signal with a round trip to a goroutine locked on a thread of its own,
// one signal at a time, while init's main thread is locked too.
func defaultSignals() error {
	for _, sig := range payloadSignals {
		// struct kernel_sigaction: handler, flags, restorer, mask; all
		// zero is SIG_DFL with an empty mask.
		var act, old [4]uint64
		if _, _, errno := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig),
			uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0); errno != 0 {
			return fmt.Errorf("rt_sigaction(%v, SIG_DFL): %w", sig, errno)
		}
		if _, _, errno := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig),
			0, uintptr(unsafe.Pointer(&old)), 8, 0, 0); errno != 0 || old[0] != 0 {
			return fmt.Errorf("rt_sigaction(%v): still handled (%#x, %v)", sig, old[0], errno)
		}
	}
	return nil
}
