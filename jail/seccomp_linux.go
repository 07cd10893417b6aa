package jail

import (
	"github.com/stockade/stockade/seccomp"
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
