package seccomp

import (
	"fmt"
	"sort"
	"strings"
)

// Policy is a complete system-call policy: every system call it knows is in
// exactly one of Allow, AllowIf, Observe, Refuse or Absent. Calls it does not know are
// answered ENOSYS, as the kernel answers a call it lacks, so that libc's
// fallbacks for newer calls keep working.
type Policy struct {
	Name    string `json:"name"`
	Summary string `json:"summary"`

	// Allow lists the calls allowed with any arguments.
	Allow []string `json:"allow"`
	// AllowIf lists the calls allowed only when their argument rules hold; a
	// call that breaks a rule is refused like a Refuse entry.
	AllowIf []Rule `json:"allow_if"`
	// Observe lists calls that are allowed but first shown to the
	// supervisor, which reads their arguments and lets them continue or
	// refuses them. It exists for connect and the send calls with a
	// destination: the jail's network namespace is what stops a direct
	// connection out (there is no route), and observing the attempt is how
	// the run can say so. Observation is for the report, never the
	// enforcement: a call let continue is checked again by the kernel, and
	// memory the caller changes after the supervisor read it changes
	// nothing the namespace allows.
	Observe []Observed `json:"observe,omitempty"`
	// Refuse lists known calls that are never allowed. Each one reaches the
	// supervisor as a user notification, is answered EPERM (Python raises a
	// clean PermissionError) and appears in the run's report.
	Refuse []Group `json:"refuse"`
	// Absent lists known calls answered ENOSYS without a report, because an
	// EPERM would break the fallback libc takes when a call is missing.
	Absent []Group `json:"absent"`
}

// Group is a set of system calls with the one reason they share.
type Group struct {
	Why   string   `json:"why"`
	Calls []string `json:"calls"`
}

// Observed is one observed call.
type Observed struct {
	Syscall string `json:"syscall"`
	Why     string `json:"why"`
	// IfSet, when 1 or more, observes the call only when argument
	// IfSet-1 (a pointer) is not NULL, compared on all 64 bits: a pointer
	// whose low half is zero is still a pointer. 0 observes every call.
	IfSet int `json:"if_set,omitempty"`
}

// Rule allows Syscall when every one of its argument rules holds.
type Rule struct {
	Syscall string    `json:"syscall"`
	Args    []ArgRule `json:"args"`
}

// ArgRule constrains one argument. Exactly one of Only and Never is set.
//
// Only the low 32 bits of the argument are compared: every argument a policy
// rules on is a 32-bit C type (int domain, unsigned int request, int option,
// unsigned int persona, clone's flags that the kernel cuts with
// lower_32_bits, pid_t), and the kernel ignores the upper half of the
// register. A 64-bit comparison would be bypassable for Never: an ioctl
// request of 0xdeadbeef00005412 is TIOCSTI to the kernel but not to a filter
// that compares 64 bits (CVE-2017-5226, CVE-2019-10063).
type ArgRule struct {
	Index int    `json:"index"` // argument position, 0 to 5
	Name  string `json:"name"`  // what the argument is, for errors and docs
	// Only allows the argument when it matches one of these.
	Only []Match `json:"only,omitempty"`
	// Never refuses the argument when it matches one of these.
	Never []Match `json:"never,omitempty"`
}

// Match is a pattern over the low 32 bits v of an argument: v matches when
// v&Mask == Value.
type Match struct {
	Mask  uint32 `json:"mask"`
	Value uint32 `json:"value"`
}

// Is matches exactly v.
func Is(v uint32) Match { return Match{Mask: ^uint32(0), Value: v} }

// Values matches exactly each of vs.
func Values(vs ...uint32) []Match {
	ms := make([]Match, len(vs))
	for i, v := range vs {
		ms[i] = Is(v)
	}
	return ms
}

// AnyBitOf matches a value with at least one of bits set, as one pattern
// per bit.
func AnyBitOf(bits uint32) []Match {
	var ms []Match
	for b := uint32(1); b != 0; b <<= 1 {
		if bits&b != 0 {
			ms = append(ms, Match{Mask: b, Value: b})
		}
	}
	return ms
}

func (m Match) matches(v uint32) bool { return v&m.Mask == m.Value }

// DefaultPolicy is the name Lookup("") resolves to.
const DefaultPolicy = "python"

// Names lists the built-in policies, sorted.
func Names() []string {
	var names []string
	for name := range builtin() {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Lookup returns a fresh copy of the named built-in policy; "" means
// DefaultPolicy.
func Lookup(name string) (*Policy, error) {
	if name == "" {
		name = DefaultPolicy
	}
	build, ok := builtin()[name]
	if !ok {
		return nil, fmt.Errorf("seccomp policy %q: unknown (the policies are: %s)", name, strings.Join(Names(), ", "))
	}
	return build(), nil
}

// Validate checks the policy's own consistency: every name appears once across
// Allow, AllowIf, Refuse and Absent, and every argument rule is well formed.
// Whether the names are real system calls is checked when the policy is
// compiled, against libseccomp's table.
func (p *Policy) Validate() error {
	if p == nil {
		return fmt.Errorf("seccomp: nil policy")
	}
	seen := map[string]string{}
	claim := func(name, where string) error {
		if name == "" {
			return fmt.Errorf("seccomp policy %q: empty system call name in %s", p.Name, where)
		}
		if prev, dup := seen[name]; dup {
			return fmt.Errorf("seccomp policy %q: %s is listed in both %s and %s", p.Name, name, prev, where)
		}
		seen[name] = where
		return nil
	}
	for _, name := range p.Allow {
		if err := claim(name, "allow"); err != nil {
			return err
		}
	}
	for _, r := range p.AllowIf {
		if err := claim(r.Syscall, "allow_if"); err != nil {
			return err
		}
		if len(r.Args) == 0 {
			return fmt.Errorf("seccomp policy %q: %s in allow_if has no argument rule", p.Name, r.Syscall)
		}
		used := map[int]bool{}
		for _, a := range r.Args {
			if a.Index < 0 || a.Index > 5 {
				return fmt.Errorf("seccomp policy %q: %s: argument index %d out of range 0-5", p.Name, r.Syscall, a.Index)
			}
			if used[a.Index] {
				// libseccomp allows one comparison per argument per rule.
				return fmt.Errorf("seccomp policy %q: %s: two rules on argument %d", p.Name, r.Syscall, a.Index)
			}
			used[a.Index] = true
			if (len(a.Only) == 0) == (len(a.Never) == 0) {
				return fmt.Errorf("seccomp policy %q: %s: rule on %s needs exactly one of only and never", p.Name, r.Syscall, a.Name)
			}
		}
	}
	for _, o := range p.Observe {
		if err := claim(o.Syscall, "observe"); err != nil {
			return err
		}
		if o.IfSet < 0 || o.IfSet > 6 {
			return fmt.Errorf("seccomp policy %q: %s: observed argument %d out of range 0-5", p.Name, o.Syscall, o.IfSet-1)
		}
	}
	for _, g := range p.Refuse {
		for _, name := range g.Calls {
			if err := claim(name, "refuse"); err != nil {
				return err
			}
		}
	}
	for _, g := range p.Absent {
		for _, name := range g.Calls {
			if err := claim(name, "absent"); err != nil {
				return err
			}
		}
	}
	return nil
}

// Observes reports whether the policy shows name to the supervisor
// before allowing it.
func (p *Policy) Observes(name string) bool {
	for _, o := range p.Observe {
		if o.Syscall == name {
			return true
		}
	}
	return false
}

// Refused reports whether the policy refuses name outright.
func (p *Policy) Refused(name string) bool {
	for _, g := range p.Refuse {
		for _, n := range g.Calls {
			if n == name {
				return true
			}
		}
	}
	return false
}
