package seccomp

import (
	"errors"
	"fmt"
	"io"
	"os"
	"unsafe"

	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"
)

// maxRulesPerCall bounds how many libseccomp rules one argument-ruled call
// may expand to, so that a careless table cannot blow the 4096-instruction
// limit of a classic BPF program.
const maxRulesPerCall = 256

// Program is a policy compiled to classic BPF for this architecture, ready
// for LoadProgram. Compiling allocates and calls into libseccomp; loading is a
// single system call, so a caller can compile before the jail is built.
type Program struct {
	Policy string
	filter []unix.SockFilter
}

// Instructions is the length of the BPF program.
func (p *Program) Instructions() int { return len(p.filter) }

// Compile turns p into a BPF program for the native architecture: allowed
// calls return ALLOW, refused ones USER_NOTIF, anything the policy does not
// name ENOSYS, and any other architecture (i386, and x32 numbers on x86_64,
// which libseccomp's x86_64 filter sends to the bad-architecture action)
// KILL_PROCESS.
func Compile(p *Policy) (*Program, error) {
	f, err := buildFilter(p)
	if err != nil {
		return nil, err
	}
	defer f.Release()
	filter, err := exportBPF(f)
	if err != nil {
		return nil, fmt.Errorf("seccomp policy %q: %w", p.Name, err)
	}
	return &Program{Policy: p.Name, filter: filter}, nil
}

// buildFilter returns p as a libseccomp filter; the caller releases it.
func buildFilter(p *Policy) (*libseccomp.ScmpFilter, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	arch, err := libseccomp.GetNativeArch()
	if err != nil {
		return nil, fmt.Errorf("seccomp: native architecture: %w", err)
	}
	f, err := libseccomp.NewFilter(libseccomp.ActErrno.SetReturnCode(int16(unix.ENOSYS)))
	if err != nil {
		return nil, fmt.Errorf("seccomp: new libseccomp filter: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			f.Release()
		}
	}()
	if err := f.SetBadArchAction(libseccomp.ActKillProcess); err != nil {
		return nil, fmt.Errorf("seccomp: bad-architecture action: %w", err)
	}
	// A binary tree of system-call numbers instead of a linear list: the
	// calls the kernel cannot cache (argument-ruled, refused) stay cheap.
	// Best effort: an old libseccomp without it still yields a correct filter.
	_ = f.SetOptimize(2)

	b := builder{f: f, arch: arch, policy: p.Name}
	for _, name := range p.Allow {
		if err := b.add(name, libseccomp.ActAllow, nil); err != nil {
			return nil, err
		}
	}
	for _, r := range p.AllowIf {
		if err := b.addRule(r); err != nil {
			return nil, err
		}
	}
	for _, o := range p.Observe {
		if err := b.addObserved(o); err != nil {
			return nil, err
		}
	}
	for _, g := range p.Refuse {
		for _, name := range g.Calls {
			if err := b.add(name, libseccomp.ActNotify, nil); err != nil {
				return nil, err
			}
		}
	}
	for _, g := range p.Absent {
		for _, name := range g.Calls {
			// ENOSYS is the filter's default action and libseccomp refuses a
			// rule that repeats it, so an Absent call only needs to exist.
			if _, _, err := b.resolve(name); err != nil {
				return nil, err
			}
		}
	}
	ok = true
	return f, nil
}

type builder struct {
	f      *libseccomp.ScmpFilter
	arch   libseccomp.ScmpArch
	policy string
}

// resolve returns the call's number here; ok is false for a real call that
// this architecture lacks (open and stat on arm64), which is skipped.
func (b builder) resolve(name string) (libseccomp.ScmpSyscall, bool, error) {
	nr, err := libseccomp.GetSyscallFromNameByArch(name, b.arch)
	if err != nil {
		return 0, false, fmt.Errorf("seccomp policy %q: %q is not a system call libseccomp knows: %w", b.policy, name, err)
	}
	return nr, nr >= 0, nil
}

func (b builder) add(name string, act libseccomp.ScmpAction, conds []libseccomp.ScmpCondition) error {
	nr, ok, err := b.resolve(name)
	if err != nil || !ok {
		return err
	}
	if len(conds) == 0 {
		err = b.f.AddRuleExact(nr, act)
	} else {
		err = b.f.AddRuleConditionalExact(nr, act, conds)
	}
	if err != nil {
		return fmt.Errorf("seccomp policy %q: rule for %s: %w", b.policy, name, err)
	}
	return nil
}

// addObserved sends an observed call to the supervisor, or, with IfSet,
// only the calls whose pointer argument is not NULL: sendto(fd, buf, len,
// flags, NULL, 0) is how send(2) and every TCP write of CPython reach the
// kernel, and must stay on the fast path. The comparisons are 64-bit
// (libseccomp checks both halves on a 64-bit architecture).
func (b builder) addObserved(o Observed) error {
	if o.IfSet == 0 {
		return b.add(o.Syscall, libseccomp.ActNotify, nil)
	}
	null, err := libseccomp.MakeCondition(uint(o.IfSet-1), libseccomp.CompareEqual, 0)
	if err != nil {
		return fmt.Errorf("seccomp policy %q: %s: %w", b.policy, o.Syscall, err)
	}
	set, err := libseccomp.MakeCondition(uint(o.IfSet-1), libseccomp.CompareNotEqual, 0)
	if err != nil {
		return fmt.Errorf("seccomp policy %q: %s: %w", b.policy, o.Syscall, err)
	}
	if err := b.add(o.Syscall, libseccomp.ActAllow, []libseccomp.ScmpCondition{null}); err != nil {
		return err
	}
	return b.add(o.Syscall, libseccomp.ActNotify, []libseccomp.ScmpCondition{set})
}

// addRule expands an argument-ruled call into disjoint libseccomp rules that
// together cover every argument value: the allowed combinations, and for each
// argument k the combinations that pass arguments before k and fail k.
// Never mix in an unconditional rule for the same call: libseccomp lets it
// silently replace the conditional ones.
func (b builder) addRule(r Rule) error {
	type side struct{ allow, refuse []Match }
	sides := make([]side, len(r.Args))
	for i, a := range r.Args {
		sides[i].allow, sides[i].refuse = split(a)
	}
	var emit func(k int, prefix []libseccomp.ScmpCondition, last []Match, act libseccomp.ScmpAction) error
	count := 0
	// cond builds the condition for one pattern over argument index.
	cond := func(index int, m Match) (libseccomp.ScmpCondition, error) {
		return libseccomp.MakeCondition(uint(index), libseccomp.CompareMaskedEqual, uint64(m.Mask), uint64(m.Value))
	}
	emit = func(k int, prefix []libseccomp.ScmpCondition, last []Match, act libseccomp.ScmpAction) error {
		for _, m := range last {
			conds := prefix
			if m.Mask != 0 { // a zero mask matches everything: no condition
				c, err := cond(r.Args[k].Index, m)
				if err != nil {
					return fmt.Errorf("seccomp policy %q: %s: %w", b.policy, r.Syscall, err)
				}
				conds = append(append([]libseccomp.ScmpCondition(nil), prefix...), c)
			}
			if count++; count > maxRulesPerCall {
				return fmt.Errorf("seccomp policy %q: %s expands to more than %d rules", b.policy, r.Syscall, maxRulesPerCall)
			}
			if len(conds) == 0 {
				// The rule restricts nothing after all; still one action.
				if err := b.add(r.Syscall, act, nil); err != nil {
					return err
				}
				continue
			}
			if err := b.add(r.Syscall, act, conds); err != nil {
				return err
			}
		}
		return nil
	}
	// Walk the product of allowed patterns argument by argument.
	var walk func(k int, prefix []libseccomp.ScmpCondition) error
	walk = func(k int, prefix []libseccomp.ScmpCondition) error {
		if err := emit(k, prefix, sides[k].refuse, libseccomp.ActNotify); err != nil {
			return err
		}
		if k == len(sides)-1 {
			return emit(k, prefix, sides[k].allow, libseccomp.ActAllow)
		}
		for _, m := range sides[k].allow {
			next := prefix
			if m.Mask != 0 {
				c, err := cond(r.Args[k].Index, m)
				if err != nil {
					return fmt.Errorf("seccomp policy %q: %s: %w", b.policy, r.Syscall, err)
				}
				next = append(append([]libseccomp.ScmpCondition(nil), prefix...), c)
			}
			if err := walk(k+1, next); err != nil {
				return err
			}
		}
		return nil
	}
	return walk(0, nil)
}

// exportBPF asks libseccomp for the program through a memfd: libseccomp
// 2.5 can only write it to a file descriptor.
func exportBPF(f *libseccomp.ScmpFilter) ([]unix.SockFilter, error) {
	fd, err := unix.MemfdCreate("stockade-seccomp", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd for the BPF export: %w", err)
	}
	file := os.NewFile(uintptr(fd), "stockade-seccomp")
	defer file.Close()
	if err := f.ExportBPF(file); err != nil {
		return nil, fmt.Errorf("export BPF: %w", err)
	}
	if _, err := file.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("rewind the BPF export: %w", err)
	}
	raw, err := io.ReadAll(file)
	if err != nil {
		return nil, fmt.Errorf("read the BPF export: %w", err)
	}
	const size = int(unsafe.Sizeof(unix.SockFilter{}))
	if len(raw) == 0 || len(raw)%size != 0 {
		return nil, fmt.Errorf("BPF export of %d bytes is not a whole number of instructions", len(raw))
	}
	if len(raw)/size > 4096 {
		return nil, errors.New("BPF program exceeds the kernel's 4096 instructions")
	}
	prog := make([]unix.SockFilter, len(raw)/size)
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&prog[0])), len(raw)), raw)
	return prog, nil
}
