package jailinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// waitPlacement waits, on cgroup v1, for the parent's "go": init is in
// the run's cgroup then, and may root its cgroup namespace there.
func waitPlacement(c *Config) error {
	if !c.WaitPlacement {
		return nil
	}
	buf := make([]byte, 64)
	n, _, _, _, err := unix.Recvmsg(ctlFD, buf, nil, 0)
	if err != nil {
		return err
	}
	if string(buf[:n]) != GoMessage {
		return fmt.Errorf("unexpected message %q", buf[:n])
	}
	return nil
}

// readConfig reads the parent's one plan.
func readConfig() (*Config, error) {
	buf := make([]byte, MaxMsg)
	n, _, _, _, err := unix.Recvmsg(ctlFD, buf, nil, 0)
	if err != nil {
		return nil, err
	}
	c, err := DecodeConfig(buf[:n])
	if err != nil {
		return nil, err
	}
	if len(c.Args) == 0 {
		return nil, errors.New("no command in config")
	}
	return c, nil
}

func send(m Msg) {
	b, _ := json.Marshal(m)
	sendRaw(b, nil)
}

func sendRaw(b, oob []byte) {
	// Nothing to do if the parent is gone: pdeathsig is about to kill us.
	_ = sendmsg(b, oob)
}

// sendmsg sends one message on the control socket from a thread other than
// this one. Once "load seccomp" ran, this locked thread carries the jail's
// filter, which shows every sendmsg to the supervisor: the listener's own
// hand-over would wait for a supervisor that cannot exist before it, and
// every later report would wait on a supervisor that may be slow (it pays
// with the jail's CPU) or gone. A goroutine never runs on a locked thread,
// and the runtime's other threads carry no filter: it is loaded without
// TSYNC, and the threads made after it come from the template thread
// started before it (see seccomp.Program.Load).
func sendmsg(b, oob []byte) error {
	errc := make(chan error, 1)
	go func() { errc <- unix.Sendmsg(ctlFD, b, oob, nil, 0) }()
	return <-errc
}

func fail(step string, err error, code int) {
	send(Msg{Kind: MsgError, Step: step, Message: err.Error(), ExitCode: code})
	os.Exit(code)
}
