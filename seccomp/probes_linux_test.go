package seccomp

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"
)

// A probe is one raw system call made on the filtered thread.
type probe struct {
	Name string    `json:"name"` // what the probe tries, e.g. "TIOCSTI with high bits"
	Call string    `json:"call"` // the system call
	Args [6]uint64 `json:"args"`
	// Fd fills argument 0 (or 1 for ioctl-like probes, see FdArg) with a
	// descriptor the helper opens: "null" (/dev/null), "pipe" (a pipe's
	// read end).
	Fd    string `json:"fd,omitempty"`
	FdArg int    `json:"fd_arg,omitempty"`
	// Want is the errno the call must fail with, or 0 for success.
	Want syscall.Errno `json:"want"`
	// Kernel says the call must reach the kernel: any result but EPERM from
	// the supervisor or ENOSYS from the filter. Used where the kernel's own
	// answer depends on the machine.
	Kernel bool `json:"kernel,omitempty"`
}

// probeResult is what the helper saw.
type probeResult struct {
	Name  string        `json:"name"`
	Ret   uintptr       `json:"ret"`
	Errno syscall.Errno `json:"errno"`
}

const allOnes = ^uint64(0)

// ones are arguments that make any call fail harmlessly if the filter let it
// through: invalid pointers (EFAULT), descriptors (EBADF) and flags (EINVAL).
var ones = [6]uint64{allOnes, allOnes, allOnes, allOnes, allOnes, allOnes}

// refusedProbes calls every call the policy refuses, with ones.
func refusedProbes(p *Policy) []probe {
	var ps []probe
	for _, g := range p.Refuse {
		for _, c := range g.Calls {
			ps = append(ps, probe{Name: "refused " + c, Call: c, Args: ones, Want: unix.EPERM})
		}
	}
	return ps
}

// helperProbes runs the probes in the JSON of arg on this (filtered) thread.
func helperProbes(arg string) int {
	var ps []probe
	if err := json.Unmarshal([]byte(arg), &ps); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	null, err := unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	var pipe [2]int
	if err := unix.Pipe2(pipe[:], unix.O_CLOEXEC); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	var results []probeResult
	for _, pr := range ps {
		nr, err := probeNumber(pr.Call)
		if err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			return 1
		}
		args := pr.Args
		switch pr.Fd {
		case "null":
			args[pr.FdArg] = uint64(null)
		case "pipe":
			args[pr.FdArg] = uint64(pipe[0])
		}
		// Point pointer-taking probes at scratch memory where they say so.
		var scratch [64]byte
		for i, a := range args {
			if a == scratchArg {
				args[i] = uint64(uintptr(unsafe.Pointer(&scratch[0])))
			}
		}
		r := probeResult{Name: pr.Name}
		if pr.Call == "clone" {
			r.Ret, r.Errno = probeClone(args[0])
		} else {
			var r1 uintptr
			r1, _, r.Errno = unix.Syscall6(uintptr(nr), uintptr(args[0]), uintptr(args[1]), uintptr(args[2]),
				uintptr(args[3]), uintptr(args[4]), uintptr(args[5]))
			r.Ret = r1
			if pr.Call == "socket" || pr.Call == "memfd_create" || pr.Call == "userfaultfd" {
				if r.Errno == 0 {
					unix.Close(int(r1))
				}
			}
		}
		results = append(results, r)
	}
	return writeJSON(results)
}

// probeNumber resolves a call name, or "#N" for a raw number.
func probeNumber(call string) (libseccomp.ScmpSyscall, error) {
	if n, ok := strings.CutPrefix(call, "#"); ok {
		v, err := strconv.Atoi(n)
		return libseccomp.ScmpSyscall(v), err
	}
	return libseccomp.GetSyscallFromName(call)
}

// scratchArg in a probe's arguments is replaced by a pointer to 64 writable
// bytes.
const scratchArg = 0x5c5c5c5c5c5c5c5c

// probeClone forks with the given flags (no CLONE_VM: the child has its own
// copy of this stack) and has the child exit at once.
func probeClone(flags uint64) (uintptr, syscall.Errno) {
	pid, _, errno := unix.RawSyscall6(unix.SYS_CLONE, uintptr(flags), 0, 0, 0, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	if pid == 0 {
		unix.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0)
	}
	var ws unix.WaitStatus
	_, _ = unix.Wait4(int(pid), &ws, unix.WALL, nil)
	return pid, 0
}

// runProbes runs ps under policy and checks each result, and that exactly
// the refused probes were reported to the supervisor.
func runProbes(t *testing.T, policy string, ps []probe) helperRun {
	t.Helper()
	arg, err := json.Marshal(ps)
	if err != nil {
		t.Fatal(err)
	}
	run := runHelper(t, "probes", policy, string(arg))
	if run.Err != nil {
		t.Fatalf("helper: %v\nstderr:\n%s", run.Err, run.Stderr)
	}
	var results []probeResult
	if err := json.Unmarshal(run.Stdout, &results); err != nil {
		t.Fatalf("helper output %q: %v\nstderr:\n%s", run.Stdout, err, run.Stderr)
	}
	if len(results) != len(ps) {
		t.Fatalf("%d results for %d probes", len(results), len(ps))
	}
	for i, pr := range ps {
		got := results[i]
		switch {
		case pr.Kernel:
			if got.Errno == unix.EPERM || got.Errno == unix.ENOSYS {
				t.Errorf("%s: %s(...) = %v, want it to reach the kernel", pr.Name, pr.Call, got.Errno)
			}
		case got.Errno != pr.Want:
			t.Errorf("%s: %s(...) errno = %d (%v), want %d (%v)", pr.Name, pr.Call, got.Errno, got.Errno, pr.Want, pr.Want)
		}
	}
	return run
}

func blockedSummary(bs []Blocked) string {
	var s []string
	for _, b := range bs {
		s = append(s, fmt.Sprintf("%s x%d", b.Example, b.Count))
	}
	return strings.Join(s, "; ")
}
