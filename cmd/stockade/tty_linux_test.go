package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/testenv"
	"golang.org/x/sys/unix"
)

// testPty is a pseudo-terminal pair; the slave is what a shell would hand
// stockade as its stdin, stdout and stderr.
type testPty struct{ master, slave *os.File }

func openTestPty(t *testing.T) *testPty {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pty: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	p := &testPty{master: m, slave: s}
	t.Cleanup(func() { s.Close(); m.Close() })
	return p
}

func (p *testPty) termios(t *testing.T) unix.Termios {
	t.Helper()
	tio, err := unix.IoctlGetTermios(int(p.slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	return *tio
}

// screen is everything written to the terminal so far (what the user
// would see), read from the master without blocking.
func (p *testPty) screen(t *testing.T) string {
	t.Helper()
	fd := int(p.master.Fd())
	if err := unix.SetNonblock(fd, true); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	buf := make([]byte, 4096)
	for {
		n, err := unix.Read(fd, buf)
		if n > 0 {
			out.Write(buf[:n])
			continue
		}
		if err == nil || errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EIO) {
			return out.String()
		}
		t.Fatal(err)
	}
}

// ttyAttack writes escape sequences to fd 0, /dev/tty and a reopened fd
// 0, turns ECHO and ICANON off wherever tcsetattr works, and floods stdout
// past the output limit (stdout and stderr are stockade's capped copies).
const ttyAttack = `
import os, sys, termios
try:
    os.write(0, b"\x1b]0;TTY-MARKER-FD0\x07\x1b[2J\n")
except OSError:
    pass
for fd in (0, 1, 2):
    try:
        a = termios.tcgetattr(fd)
        a[3] &= ~(termios.ECHO | termios.ICANON)
        termios.tcsetattr(fd, termios.TCSANOW, a)
        print("TTY-MARKER-TERMIOS", fd, file=sys.stderr)
    except (OSError, termios.error):
        pass
for path in ("/dev/tty", "/proc/self/fd/0"):
    try:
        with open(path, "wb", buffering=0) as f:
            f.write(b"TTY-MARKER-REOPEN\n")
    except OSError:
        pass
sys.stdout.write("X" * 5000)
`

// TestAttackTerminalOnStdin runs stockade with a terminal as its stdin,
// stdout and stderr, as from an interactive shell. The jail must reach
// the terminal only through the capped output stockade copies: none of
// its writes to fd 0, /dev/tty or a reopened fd 0 appear, and the
// terminal's settings are the same after the run.
func TestAttackTerminalOnStdin(t *testing.T) {
	testenv.NeedJail(t)
	for _, asJSON := range []bool{false, true} {
		p := openTestPty(t)
		before := p.termios(t)
		args := []string{"run", "--no-cgroup", "--output-limit", "100"}
		if asJSON {
			args = append(args, "--json")
		}
		args = append(args, "--", "python3", "-c", ttyAttack)
		cmd := exec.Command("/proc/self/exe", args...)
		cmd.Env = append(os.Environ(), "STOCKADE_TEST_MAIN=1")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = p.slave, p.slave, p.slave
		done := make(chan error, 1)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Fatal("stockade with a terminal on stdin did not end")
		}
		screen := p.screen(t)
		if strings.Contains(screen, "TTY-MARKER-FD0") || strings.Contains(screen, "TTY-MARKER-REOPEN") ||
			strings.Contains(screen, "TTY-MARKER-TERMIOS") {
			t.Errorf("json=%v: the jail wrote to the terminal or changed it:\n%q", asJSON, screen)
		}
		if n := strings.Count(screen, "X"); n > 100 {
			t.Errorf("json=%v: %d bytes of output reached the terminal past the 100-byte cap", asJSON, n)
		}
		if asJSON && !strings.HasPrefix(strings.TrimSpace(screen), "{") {
			t.Errorf("json: the terminal shows more than the result: %q", screen)
		}
		if !asJSON && !strings.Contains(screen, "stdout cut at 100 bytes") {
			t.Errorf("no run at all? screen %q", screen)
		}
		if after := p.termios(t); after != before {
			t.Errorf("json=%v: termios changed by the run: lflag %#x -> %#x", asJSON, before.Lflag, after.Lflag)
		}
	}
}

// TestTerminalInputReachesTheJail: what the user types still arrives,
// through the pipe, and the run ends when the program does, not when the
// terminal sends EOF.
func TestTerminalInputReachesTheJail(t *testing.T) {
	testenv.NeedJail(t)
	p := openTestPty(t)
	if _, err := p.master.Write([]byte("print(6*7)\n\x04")); err != nil {
		t.Fatal(err)
	}
	out, err := runWithStdin(t, p.slave, "run", "--no-cgroup", "--", "python3", "-")
	if err != nil || strings.TrimSpace(out) != "42" {
		t.Fatalf("typed program: %q %v", out, err)
	}
	// Nothing typed: the jail does not read stdin, and the run still ends.
	out, err = runWithStdin(t, p.slave, "run", "--no-cgroup", "--", "python3", "-c", "print('done')")
	if err != nil || out != "done\n" {
		t.Fatalf("idle terminal: %q %v", out, err)
	}
}

func runWithStdin(t *testing.T, stdin *os.File, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("/proc/self/exe", args...)
	cmd.Env = append(os.Environ(), "STOCKADE_TEST_MAIN=1")
	cmd.Stdin = stdin
	var out bytes.Buffer
	cmd.Stdout = &out
	timer := time.AfterFunc(30*time.Second, func() { cmd.Process.Kill() })
	defer timer.Stop()
	err := cmd.Run()
	return out.String(), err
}
