package jailinit

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// envTimeNSHelper makes the test binary the helper of
// TestAttackTimeNSNoteFromAnotherContext (in init, on the main thread,
// where unshareTime works).
const envTimeNSHelper = "STOCKADE_TIMENS_NOTE_HELPER"

func init() {
	if os.Getenv(envTimeNSHelper) != "" {
		runtime.LockOSThread()
		os.Exit(timeNSNoteHelper())
	}
}

// timeNSNoteHelper refuses unshare(CLONE_NEWTIME) to the whole process
// (as a systemd unit's RestrictNamespaces= without "time", a container's
// seccomp profile or a used-up user.max_time_namespaces would), then asks
// init's step as a parent told by this boot's note would: known.
func timeNSNoteHelper() int {
	const cloneNewTime = 0x80
	prog := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0}, // nr
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: unix.SYS_UNSHARE, Jt: 0, Jf: 3},
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 16}, // args[0], low half
		{Code: unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K, K: cloneNewTime, Jt: 0, Jf: 1},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW},
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "no_new_privs:", err)
		return 3
	}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog))); e != 0 {
		fmt.Fprintln(os.Stderr, "seccomp:", e)
		return 3
	}
	if TimeNamespaceUsable() {
		fmt.Fprintln(os.Stderr, "the probe says yes under a filter that refuses the namespace")
		return 3
	}
	if err := unshareTime(true); err != nil {
		fmt.Fprintln(os.Stderr, "unshare time namespace:", err)
		return 1
	}
	return 0
}

// TestAttackTimeNSNoteFromAnotherContext: this boot's note (jail/timens_linux.go)
// says a time namespace is usable because the process that wrote it could
// make one; the note is the user's, shared by every stockade of theirs,
// and another of them may run where making one is refused (a hardened
// service's seccomp filter, user.max_time_namespaces used up). Without the
// note init's probe says no there and the run goes on without the
// namespace, as on a kernel without them; with it, init must do the same,
// not fail every run of that stockade until the next boot.
func TestAttackTimeNSNoteFromAnotherContext(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envTimeNSHelper+"=1")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 3 {
		t.Skipf("cannot refuse the namespace here: %s", out)
	}
	if err != nil {
		t.Errorf("told by the note, init fails where the probe would have gone on without a time namespace: %v\n%s", err, out)
	}
}
