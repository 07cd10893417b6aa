package jailinit

import (
	"fmt"

	"github.com/stockade/stockade/seccomp/bpf"
	"golang.org/x/sys/unix"
)

// loadSeccomp installs the compiled policy on the calling (locked) thread,
// the last step before the payload is forked from it, and hands the
// listener for refused calls to the parent, which answers them from
// outside the jail. Init keeps no copy: only the supervisor may answer.
func loadSeccomp(name string, program []byte) error {
	if name == "off" {
		return nil
	}
	filter, err := bpf.Decode(program)
	if err != nil {
		return err
	}
	fd, err := bpf.Load(name, filter)
	if err != nil {
		return err
	}
	b := []byte(`{"t":"` + string(MsgSeccomp) + `"}`)
	err = sendmsg(b, unix.UnixRights(fd))
	unix.Close(fd)
	if err != nil {
		return fmt.Errorf("hand the listener to the supervisor: %w", err)
	}
	return nil
}
