package jail

import (
	"fmt"

	"github.com/stockade/stockade/seccomp"
	"golang.org/x/sys/unix"
)

// checkSeccomp resolves the policy in the parent, so that an unknown name
// fails before any jail starts.
func checkSeccomp(name string) error {
	if name == "off" {
		return nil
	}
	_, err := seccomp.Lookup(name)
	return err
}

// loadSeccomp installs the named policy on the calling (locked) thread of
// init, the last step before the payload is forked from it, and hands the
// listener for refused calls to the parent, which answers them from outside
// the jail. Init keeps no copy: only the supervisor may answer.
func loadSeccomp(name string) error {
	if name == "off" {
		return nil
	}
	p, err := seccomp.Lookup(name)
	if err != nil {
		return err
	}
	fd, err := seccomp.Load(p)
	if err != nil {
		return err
	}
	b := []byte(`{"t":"` + string(msgSeccomp) + `"}`)
	err = unix.Sendmsg(ctlFD, b, unix.UnixRights(fd), nil, 0)
	unix.Close(fd)
	if err != nil {
		return fmt.Errorf("hand the listener to the supervisor: %w", err)
	}
	return nil
}

// blockedOf converts the supervisor's record for the result.
func blockedOf(s *seccomp.Supervisor) []BlockedSyscall {
	out := []BlockedSyscall{}
	if s == nil {
		return out
	}
	for _, b := range s.Blocked() {
		out = append(out, BlockedSyscall{Name: b.Name, Count: b.Count, Example: b.Example})
	}
	return out
}
