package jailinit

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// unshareTime gives the payload (init's children; init itself stays where
// it is) a time namespace whose CLOCK_BOOTTIME starts at the jail's start.
// /proc/uptime and the start times in /proc/PID/stat read that clock, and
// the host's would tell how long the host has been up (its last reboot,
// so its patch level). CLOCK_MONOTONIC is left alone. A kernel without
// time namespaces (CONFIG_TIME_NS, Linux 5.6) shows the host's uptime, as
// before; any other failure stops the run.
//
// The kernel keeps the offsets with the thread group leader only
// (/proc/PID/timens_offsets has no per-thread twin), while unshare moves
// the calling thread: this works only on the main thread, where Main
// runs (the jailinit binary locks it in an init(); without it, package
// jail's init calls Main while the runtime still holds the main goroutine
// on the main thread). Elsewhere it is skipped. known skips the probe.
func unshareTime(known bool) error {
	if unix.Gettid() != unix.Getpid() || !(known || TimeNamespaceUsable()) {
		return nil
	}
	if err := unix.Unshare(unix.CLONE_NEWTIME); err != nil {
		// EINVAL: a kernel without time namespaces. known: the note was
		// left by a process of this user that could make one, and this
		// one cannot (a seccomp filter or RestrictNamespaces= of its own,
		// user.max_time_namespaces used up): the probe would have said no
		// here, and the run goes on without one, as it would have.
		if errors.Is(err, unix.EINVAL) || known {
			return nil
		}
		return err
	}
	// Zero is init's own start (in clock ticks of 10 ms, rounded down), so
	// that init's start time, seen from the payload, is not negative.
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return err
	}
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(f) < 20 {
		return fmt.Errorf("/proc/self/stat: %q", stat)
	}
	ticks, err := strconv.ParseInt(f[19], 10, 64) // field 22, starttime
	if err != nil {
		return fmt.Errorf("/proc/self/stat starttime: %w", err)
	}
	start := ticks * 10_000_000 // USER_HZ is 100 on every Linux
	// The offset's nanoseconds must lie in [0, 1e9).
	sec, nsec := -(start/1_000_000_000)-1, 1_000_000_000-start%1_000_000_000
	if nsec == 1_000_000_000 {
		sec, nsec = sec+1, 0
	}
	off := fmt.Sprintf("%d %d %d\n", unix.CLOCK_BOOTTIME, sec, nsec)
	// Init is not dumpable (protectInit), which makes its /proc files
	// root's; for this one write it is, while nothing else runs in the
	// jail yet.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0); err != nil {
		return err
	}
	werr := os.WriteFile("/proc/self/timens_offsets", []byte(off), 0)
	if err := protectInit(); err != nil {
		return err
	}
	if werr != nil {
		return fmt.Errorf("boottime offset: %w", werr)
	}
	return nil
}

// TimeNamespaceUsable reports whether a process can start another while a
// time namespace is pending for its children. Go starts processes with
// clone(CLONE_VM|CLONE_VFORK), which kernels before the switch moved to
// exec (Linux 6.1 and older, at least) refuse with EINVAL then: there the
// payload could not be started at all. The probe runs on a thread of its
// own that is never unlocked, so the thread, and the namespace pending on
// it, end with the goroutine; the exec of "/" always fails.
func TimeNamespaceUsable() bool {
	ok := make(chan bool)
	go func() {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWTIME); err != nil {
			ok <- false
			return
		}
		_, err := syscall.ForkExec("/", []string{"/"}, &syscall.ProcAttr{})
		ok <- err != nil && !errors.Is(err, syscall.EINVAL)
	}()
	return <-ok
}
