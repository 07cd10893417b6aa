package seccomp

import (
	"testing"

	libseccomp "github.com/seccomp/libseccomp-golang"
)

// reviewedThrough is the newest system call number the policies were
// reviewed against: futex_requeue, Linux 6.7. From 424 on, numbers are the
// same on every architecture.
const reviewedThrough = 456

// TestPolicyKnowsEverySyscall: every call libseccomp names on this
// architecture up to reviewedThrough is decided by every policy, and every
// name a policy uses is one libseccomp knows. A libseccomp update that names
// a call nobody reviewed fails here rather than quietly turning ENOSYS into
// EPERM or the other way round.
func TestPolicyKnowsEverySyscall(t *testing.T) {
	arch, err := libseccomp.GetNativeArch()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range Names() {
		p, _ := Lookup(name)
		decided := map[string]bool{}
		for _, c := range p.Allow {
			decided[c] = true
		}
		for _, r := range p.AllowIf {
			decided[r.Syscall] = true
		}
		for _, o := range p.Observe {
			decided[o.Syscall] = true
		}
		for _, g := range append(append([]Group(nil), p.Refuse...), p.Absent...) {
			for _, c := range g.Calls {
				decided[c] = true
			}
		}
		for c := range decided {
			if _, err := libseccomp.GetSyscallFromNameByArch(c, arch); err != nil {
				t.Errorf("%s: %q is not a system call libseccomp knows", name, c)
			}
		}
		for nr := 0; nr <= reviewedThrough; nr++ {
			c, err := libseccomp.ScmpSyscall(nr).GetNameByArch(arch)
			if err != nil {
				continue // a hole in the numbering
			}
			if !decided[c] {
				t.Errorf("%s: system call %s (%d) is neither allowed, refused nor absent", name, c, nr)
			}
		}
	}
}
