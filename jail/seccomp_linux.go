package jail

import (
	"fmt"

	"github.com/stockade/stockade/seccomp"
	"golang.org/x/sys/unix"
)

// compileSeccomp resolves and compiles the policy on the host side, so that
// an unknown name fails before any jail starts and init only has to load a
// ready program. Built-in policies come precompiled (libseccomp takes over
// 10 ms for the python policy); Compile is the fallback for an architecture
// without them.
func compileSeccomp(name string) ([]byte, error) {
	if name == "off" {
		return nil, nil
	}
	p, err := seccomp.Lookup(name)
	if err != nil {
		return nil, err
	}
	prog, ok := seccomp.Precompiled(name)
	if !ok {
		if prog, err = seccomp.Compile(p); err != nil {
			return nil, err
		}
	}
	return seccomp.EncodeBPF(prog.BPF()), nil
}

// loadSeccomp installs the named policy on the calling (locked) thread of
// init, the last step before the payload is forked from it, and hands the
// listener for refused calls to the parent, which answers them from outside
// the jail. Init keeps no copy: only the supervisor may answer.
func loadSeccomp(name string, bpf []byte) error {
	if name == "off" {
		return nil
	}
	filter, err := seccomp.DecodeBPF(bpf)
	if err != nil {
		return err
	}
	prog, err := seccomp.ProgramFromBPF(name, filter)
	if err != nil {
		return err
	}
	fd, err := prog.Load()
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
