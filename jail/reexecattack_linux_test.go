package jail

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/testenv"
	"golang.org/x/sys/unix"
)

// TestAttackArgv0JailinitTakesOverAProgram: package jail's init() turns a
// process into a jail's init before its main runs. It decided by what any
// caller of execve chooses, argv = ["jailinit"] and a SOCK_SEQPACKET
// socket at fd 3, so whoever could start a program that imports jail (a
// setuid or file-capability helper built on the library, a service whose
// argv another user configures) could make it skip its own main and run
// init's steps (remount / as a slave, mount, pivot_root, setrlimit) with
// that program's privileges, in the host's namespaces, from a config the
// caller writes on fd 3. A real jail's init is pid 1 of the pid namespace
// Run made, which no caller of execve can arrange without already holding
// CAP_SYS_ADMIN. Here stockade itself is that program: given the crafted
// argv and socket but started as an ordinary child, its own main must run
// (printing its usage), and nothing may come back on the socket.
func TestAttackArgv0JailinitTakesOverAProgram(t *testing.T) {
	bin := testenv.NeedBinary(t, "starts a program that imports package jail")
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "attacker"), os.NewFile(uintptr(fds[1]), "fd3")
	defer ours.Close()
	var stdout, stderr bytes.Buffer
	cmd := &exec.Cmd{Path: bin, Args: []string{"jailinit"}, Env: []string{},
		ExtraFiles: []*os.File{theirs}, Stdout: &stdout, Stderr: &stderr}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	theirs.Close()
	// No config: a hijacked process fails reading it, before any mount.
	if err := unix.Shutdown(fds[0], unix.SHUT_WR); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatal("the program did not end in 60s")
	}
	_ = ours.SetReadDeadline(time.Now().Add(time.Second))
	msg := make([]byte, 4096)
	n, _ := unix.Read(fds[0], msg)
	if n > 0 || !strings.Contains(stdout.String(), "USAGE:") {
		t.Errorf("stockade started as argv [jailinit] with a seqpacket socket at fd 3 ran as a jail's init, not its own main: %v, sent %q, stdout %q, stderr %q",
			err, msg[:max(n, 0)], stdout.String(), stderr.String())
	}
}
