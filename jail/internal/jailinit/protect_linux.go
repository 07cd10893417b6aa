package jailinit

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
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

// faultSignals are the signals Go's runtime takes for a fault (or a fatal
// trap) of init's own, whatever signal.Notify says, unless their si_code
// says kill() or tgkill() sent them. The payload runs as the uid of init's
// main thread, so the kernel lets it signal init with any other si_code:
// sigqueue (SI_QUEUE), or a descriptor it owns with F_SETOWN 1 and
// F_SETSIG (POLL_IN), and init crashed with a Go stack trace, the run with it.
var faultSignals = []unix.Signal{unix.SIGSEGV, unix.SIGBUS, unix.SIGFPE, unix.SIGILL,
	unix.SIGTRAP, unix.SIGSYS, unix.SIGSTKFLT}

// defaultFaultSignals gives faultSignals their default action, bypassing
// Go's handlers (the runtime offers no way to), and reads each back. The
// kernel drops a signal sent to a pid namespace's init from inside it while
// its action is the default, whatever the si_code; a real fault in init is
// forced through and still kills it, as Go's handler would have.
func defaultFaultSignals() error {
	for _, sig := range faultSignals {
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

// discardSignals catches every signal a payload could send init and
// throws it away. Init is pid 1 of its namespace; signals from the payload
// with no handler are dropped by the kernel, but Go installs handlers (and
// crashes on a kill()ed SIGABRT, SIGSEGV, SIGTRAP and the like), so
// catch every one a payload could send and throw it away: the payload
// must not be able to take init down and turn its run into a setup
// error. Caught, not ignored: an ignored signal stays ignored across
// execve, and the payload would start with SIGINT, SIGTERM and the
// rest ignored (Python then never raises KeyboardInterrupt). Faults
// init itself causes are still fatal.
func discardSignals() {
	discard := make(chan os.Signal, 16)
	signal.Notify(discard, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGTSTP,
		syscall.SIGABRT, syscall.SIGTRAP, syscall.SIGILL, syscall.SIGSYS, syscall.SIGSEGV, syscall.SIGBUS,
		syscall.SIGFPE, syscall.SIGALRM, syscall.SIGVTALRM, syscall.SIGPROF, syscall.SIGXCPU, syscall.SIGXFSZ,
		syscall.SIGSTKFLT, syscall.SIGPWR, syscall.SIGIO)
	go func() {
		for range discard {
		}
	}()
}
