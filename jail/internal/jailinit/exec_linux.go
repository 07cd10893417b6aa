package jailinit

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// startPayload forks and execs the payload from the current thread, with
// stdin, stdout, stderr and the descriptors passed on purpose as 3, 4, ...
// Init closes its own copies of those: the payload's end of a channel must
// be the payload's alone, so that its peer on the host sees the end of
// file when the payload is gone, not when init is. So with stdout and
// stderr: the parent's drain ends when the payload (and whatever it left
// holding them) is gone, not after init's own exit, which a run that ends
// at its payload's exit would wait for. Init writes nothing there from now
// on (its reports go over the control socket) and opens no descriptor
// after this, so 1 and 2 stay free.
func startPayload(argv0 string, c *Config) (int, error) {
	files := []uintptr{0, 1, 2}
	for _, fd := range c.PassFDs {
		files = append(files, uintptr(fd))
	}
	defer func() {
		for _, fd := range c.PassFDs {
			unix.Close(fd)
		}
	}()
	pid, err := syscall.ForkExec(argv0, c.Args, &syscall.ProcAttr{
		Dir:   "/work",
		Env:   c.Env,
		Files: files,
		// A new session: the payload has no controlling terminal, so a
		// TIOCSTI on an inherited tty fd cannot type into the caller's
		// shell (CVE-2017-5226); seccomp refuses TIOCSTI as well.
		Sys: &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		return 0, execError(c.Args[0], err)
	}
	unix.Close(1)
	unix.Close(2)
	return pid, nil
}

// lookPath finds the command inside the jail, as execvp would.
func lookPath(name string, dirs []string) (string, error) {
	notFound := &SetupError{Step: "exec", Message: fmt.Sprintf("%s: command not found in the jail (PATH=%s)", name, strings.Join(dirs, ":")), ExitCode: ExitNotFound}
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, d := range dirs {
		p := d + "/" + name
		var st unix.Stat_t
		if unix.Stat(p, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Mode&0o111 != 0 {
			return p, nil
		}
	}
	return "", notFound
}

func execError(name string, err error) error {
	code := ExitCannotRun
	if errors.Is(err, syscall.ENOENT) {
		code = ExitNotFound
	}
	return &SetupError{Step: "exec", Message: fmt.Sprintf("%s: %v", name, err), ExitCode: code}
}

// reap waits for every child init has (double-forked daemons are
// re-parented here) until the payload itself exits, then reports and exits:
// the kernel kills what is left in the pid namespace when its init dies.
func reap(payload int, tr *trace) {
	for {
		var ws unix.WaitStatus
		var ru unix.Rusage
		pid, err := unix.Wait4(-1, &ws, 0, &ru)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			fail("wait", err, ExitJailError)
		}
		if pid == payload {
			tr.mark("payload exited")
			send(Msg{Kind: MsgExit, Phases: tr.take(), Status: uint32(ws),
				UtimeUs: ru.Utime.Sec*1e6 + ru.Utime.Usec, StimeUs: ru.Stime.Sec*1e6 + ru.Stime.Usec,
				MaxRSS: ru.Maxrss})
			os.Exit(0)
		}
	}
}
