package seccomp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The real filter tests re-execute the test binary as a helper process: the
// helper locks its main goroutine to its thread, sets no_new_privs, loads a
// policy, hands the listener to this process over SCM_RIGHTS exactly as the
// jail's init hands it to the host-side parent, and then runs its mode on the
// filtered thread. This process supervises.

const (
	envHelper = "STOCKADE_SECCOMP_HELPER" // the mode; set only in the helper
	envPolicy = "STOCKADE_SECCOMP_POLICY" // policy name, or "off" for no filter
	envArg    = "STOCKADE_SECCOMP_ARG"    // mode-specific argument
)

// helperModes are the helper's behaviours, run on the filtered thread.
var helperModes = map[string]func(arg string) int{
	"probes": helperProbes,
	"x32":    helperX32,
	"exec":   helperExec,
	"late":   helperLate,
}

// TestMain turns the test binary into the helper when envHelper is set.
func TestMain(m *testing.M) {
	if mode := os.Getenv(envHelper); mode != "" {
		os.Exit(helperMain(mode))
	}
	os.Exit(m.Run())
}

func helperMain(mode string) int {
	run, ok := helperModes[mode]
	if !ok {
		fmt.Fprintf(os.Stderr, "helper: unknown mode %q\n", mode)
		return 2
	}
	// Never unlocked: the thread carries the filter, and a goroutine that
	// exits locked takes its thread with it.
	runtime.LockOSThread()
	if name := os.Getenv(envPolicy); name != "off" {
		if err := loadAndHandOff(name); err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			return 3
		}
	}
	return run(os.Getenv(envArg))
}

// loadAndHandOff is the jail init's sequence: NNP, Load, send the listener
// to the parent over fd 3, close our copy.
func loadAndHandOff(name string) error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	// "NAME+compile" compiles with libseccomp in the helper (Load); plain
	// NAME loads the embedded program, as the jail does.
	name, compile := strings.CutSuffix(name, "+compile")
	p, err := Lookup(name)
	if err != nil {
		return err
	}
	prog, ok := Precompiled(name)
	var fd int
	if compile || !ok {
		fd, err = Load(p)
	} else {
		fd, err = prog.Load()
	}
	if err != nil {
		return err
	}
	// From another thread, as init does: this one now carries the filter,
	// which sends every sendmsg to the supervisor this message creates.
	sent := make(chan error, 1)
	go func() { sent <- unix.Sendmsg(3, []byte("listener"), unix.UnixRights(fd), nil, 0) }()
	if err := <-sent; err != nil {
		return fmt.Errorf("send listener: %w", err)
	}
	// The payload must never hold the listener: it could answer its own
	// refused calls with CONTINUE.
	if err := unix.Close(fd); err != nil {
		return err
	}
	return unix.Close(3)
}

// helperRun is what a test sees of one helper run.
type helperRun struct {
	Stdout  []byte
	Stderr  []byte
	Err     error // from Wait: nil, or how the helper exited
	Blocked []Blocked
}

func (r helperRun) blocked(name string) (Blocked, bool) {
	for _, b := range r.Blocked {
		if b.Name == name {
			return b, true
		}
	}
	return Blocked{}, false
}

// helperTimeout bounds one helper run; the CPython suite runs get longer.
var helperTimeout = 120 * time.Second

// helperProc is a started helper whose listener, unless the policy is
// "off", has arrived over SCM_RIGHTS.
type helperProc struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	listener       int
	killer         *time.Timer
}

// startHelper starts the helper in mode under policy and receives its
// listener.
func startHelper(t testing.TB, mode, policy, arg string) *helperProc {
	t.Helper()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours := os.NewFile(uintptr(pair[0]), "supervisor end")
	theirs := os.NewFile(uintptr(pair[1]), "helper end")
	defer ours.Close()

	h := &helperProc{listener: -1}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envHelper+"="+mode, envPolicy+"="+policy, envArg+"="+arg)
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.Stdout, cmd.Stderr = &h.stdout, &h.stderr
	// No controlling terminal, as in the jail: vhangup and TIOCSTI, were the
	// filter to miss them, would have no terminal to act on.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	// A hung helper is killed, and Wait stops waiting for output that its
	// descendants still hold open.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	theirs.Close()
	h.cmd = cmd
	h.killer = time.AfterFunc(helperTimeout, func() { _ = cmd.Process.Kill() })
	if policy != "off" {
		fd, err := receiveListener(int(ours.Fd()))
		if err != nil {
			_ = h.wait()
			t.Fatalf("receive listener: %v; helper stderr:\n%s", err, h.stderr.String())
		}
		h.listener = fd
	}
	return h
}

func (h *helperProc) wait() error {
	defer h.killer.Stop()
	return h.cmd.Wait()
}

// runHelper runs the helper in mode under policy and supervises it.
func runHelper(t testing.TB, mode, policy, arg string) helperRun {
	t.Helper()
	h := startHelper(t, mode, policy, arg)
	var sup *Supervisor
	supDone := make(chan struct{})
	if h.listener >= 0 {
		sup = NewSupervisor(h.listener)
		go func() { sup.Run(); close(supDone) }()
	} else {
		close(supDone)
	}
	waitErr := h.wait()
	select {
	case <-supDone:
	case <-time.After(10 * time.Second):
		t.Error("supervisor did not see the listener hang up after the helper exited")
	}
	run := helperRun{Stdout: h.stdout.Bytes(), Stderr: h.stderr.Bytes(), Err: waitErr}
	if sup != nil {
		run.Blocked = sup.Blocked()
		if err := sup.Err(); err != nil {
			t.Errorf("supervisor: %v", err)
		}
		if err := sup.Close(); err != nil {
			t.Errorf("close supervisor: %v", err)
		}
	}
	return run
}

// receiveListener takes the listener fd out of one SCM_RIGHTS message.
func receiveListener(sock int) (int, error) {
	buf := make([]byte, 16)
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(sock, buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return -1, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return -1, err
	}
	if len(msgs) != 1 {
		return -1, fmt.Errorf("%d control messages, want 1 (the helper failed before sending?)", len(msgs))
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil {
		return -1, err
	}
	if len(fds) != 1 {
		return -1, fmt.Errorf("%d fds, want 1", len(fds))
	}
	return fds[0], nil
}

func writeJSON(v any) int {
	if err := json.NewEncoder(os.Stdout).Encode(v); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	return 0
}

// helperX32 makes getpid through the x32 ABI (the syscall number with bit
// 30 set), which the filter must answer by killing the process.
func helperX32(string) int {
	const x32SyscallBit = 0x40000000
	_, _, errno := unix.RawSyscall(x32SyscallBit|unix.SYS_GETPID, 0, 0, 0)
	fmt.Printf("x32 getpid survived: errno %d\n", errno)
	return 0
}

// helperExec forks and execs /usr/bin/python3 with the arguments in the JSON
// list arg from the filtered thread,
// with syscall.ForkExec as the jail's init does (clone with CLONE_VM|
// CLONE_VFORK, setsid, PR_SET_PDEATHSIG, dup3, execve), and exits with its
// status.
func helperExec(arg string) int {
	var pyArgs []string
	if err := json.Unmarshal([]byte(arg), &pyArgs); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	pid, err := syscall.ForkExec(pythonPath, append([]string{pythonPath}, pyArgs...), &syscall.ProcAttr{
		Env:   []string{"PATH=/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1"},
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper: fork/exec python:", err)
		return 4
	}
	var ws syscall.WaitStatus
	for {
		_, err = syscall.Wait4(pid, &ws, 0, nil)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper: wait:", err)
		return 5
	}
	if ws.Signaled() {
		fmt.Fprintf(os.Stderr, "helper: python killed by %v\n", ws.Signal())
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

const pythonPath = "/usr/bin/python3"

// helperLate makes a refused call (unshare(0)) after arg milliseconds and
// prints its errno.
func helperLate(arg string) int {
	ms, _ := strconv.Atoi(arg)
	time.Sleep(time.Duration(ms) * time.Millisecond)
	_, _, errno := unix.Syscall(unix.SYS_UNSHARE, 0, 0, 0)
	fmt.Println(int(errno))
	return 0
}
