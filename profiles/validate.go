package profiles

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/stockade/stockade/cgroup"
	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/netproxy"
)

// Bounds Validate enforces. The lower bounds catch a forgotten unit
// ("memory = 512" is 512 bytes) as much as nonsense; the upper ones are the
// kernel's own (pid_max, nr_open).
const (
	MinMemory = 4 << 20
	// MinCPUs is the kernel's smallest CPU quota, 1 ms per 100 ms period
	// (cgroup.MinCPUs): below it the cgroup refuses the limit.
	MinCPUs = cgroup.MinCPUs
	MaxCPUs = 1024
	// MinPids leaves room for the jail's own init, a Go program whose
	// runtime starts several threads (7 measured on 2 cores) that the pids
	// limit counts: below about 9, init dies of a failed clone with a Go
	// stack dump, or the payload cannot even exec.
	MinPids = 16
	MaxPids = 4194304
	// MinOpenFiles leaves room for the jail's init, which applies the
	// limit to itself and then still opens descriptors of its own (the
	// /proc/sys/user files it writes, its runtime's): below 10 (11 for a
	// server's jail, which passes its driver's channel) init cannot write
	// its kernel-object limits ("too many open files") and the run fails
	// as the server's 500. Measured 10 + the descriptors passed, so 16
	// leaves room for up to 6 passed.
	MinOpenFiles = 16
	MaxOpenFiles = 1 << 20
)

// Validate checks every field's value, whether set or not (an unset field
// is zero, and a zero timeout is as dangerous unset as set), by its schema
// row's check, and returns all the problems joined, in schema order, each
// an *Error naming where the bad value came from. Load validates what it
// returns; call Validate again after merging flags.
func (p *Profile) Validate() error {
	var errs []error
	for _, row := range schema {
		if row.check == nil {
			continue
		}
		o, _ := p.Origin(row.field)
		for _, pr := range row.check(row.ptr(p)) {
			errs = append(errs, &Error{Origin: o, Field: string(row.field) + pr.at, Msg: pr.msg})
		}
	}
	return errors.Join(errs...)
}

// problem is what a check found wrong: at names the element of a
// collection ("[1]", ".NAME"; "" for the field itself).
type problem struct{ at, msg string }

func fail(format string, args ...any) []problem {
	return []problem{{msg: fmt.Sprintf(format, args...)}}
}

// signOf is -1, 0 or 1 as a size, count, duration or number is negative,
// zero or positive; NaN counts as negative.
func signOf(v any) int {
	switch x := v.(type) {
	case *int64:
		return cmp.Compare(*x, 0)
	case *time.Duration:
		return cmp.Compare(*x, 0)
	case *float64:
		if math.IsNaN(*x) {
			return -1
		}
		return cmp.Compare(*x, 0)
	}
	panic(fmt.Sprintf("internal: no sign of %T", v))
}

// positive is the check of a size, duration or count that must be more
// than 0.
func positive(v any) []problem {
	if signOf(v) <= 0 {
		return fail("must be more than 0")
	}
	return nil
}

// nonNegative is the check of a value whose 0 means none (no swap, no
// limit). Negative values cannot be parsed, but Go code can set them.
func nonNegative(v any) []problem {
	if signOf(v) < 0 {
		return fail("must not be negative")
	}
	return nil
}

// sizeAtLeast is the check of a size with a minimum, which catches a
// forgotten unit ("memory = 512" is 512 bytes).
func sizeAtLeast(lowest int64) func(any) []problem {
	return func(v any) []problem {
		if n := *v.(*int64); n < lowest {
			return fail("%s is below the minimum of %s (a missing unit?)", FormatSize(n), FormatSize(lowest))
		}
		return nil
	}
}

// intIn is the check of a count in [lo, hi].
func intIn(lo, hi int64) func(any) []problem {
	return func(v any) []problem {
		if n := *v.(*int64); n < lo || n > hi {
			return fail("%d is not in [%d, %d]", n, lo, hi)
		}
		return nil
	}
}

// floatIn is the check of a number in [lo, hi].
func floatIn(lo, hi float64) func(any) []problem {
	return func(v any) []problem {
		if n := *v.(*float64); !(n >= lo && n <= hi) {
			return fail("%v is not in [%v, %v]", n, lo, hi)
		}
		return nil
	}
}

func rootfsValue(v any) []problem {
	if r := *v.(*string); r != RootfsHost && !isAbsClean(r) {
		return fail("%q must be %q or an absolute, clean path", r, RootfsHost)
	}
	return nil
}

func workdirValue(v any) []problem {
	if w := *v.(*string); w != WorkdirFresh && w != WorkdirNone && !(isAbsClean(w) && w != "/") {
		return fail("%q must be %q, %q or an absolute, clean path other than /", w, WorkdirFresh, WorkdirNone)
	}
	return nil
}

func seccompValue(v any) []problem {
	if s := *v.(*string); !slices.Contains(SeccompPolicies(), s) {
		return fail("%q must be one of %s", s, quoteList(SeccompPolicies()))
	}
	return nil
}

// The isolation tiers a profile may name (docs/isolation.md).
const (
	IsolationJail = jail.IsolationJail
	IsolationVM   = jail.IsolationVM
)

func isolationValue(v any) []problem {
	if m := *v.(*string); m != IsolationJail && m != IsolationVM {
		return fail("%q must be %q or %q", m, IsolationJail, IsolationVM)
	}
	return nil
}

func networkModeValue(v any) []problem {
	if m := *v.(*string); m != NetworkNone {
		return fail("%q must be %q (the only mode for now)", m, NetworkNone)
	}
	return nil
}

// bindsValue asks jail.CheckBindDest, the one list of the paths stockade
// manages, so that a flag and a file are refused alike.
func bindsValue(v any) []problem {
	var probs []problem
	seen := make(map[string]bool)
	for i, b := range *v.(*[]Bind) {
		at := fmt.Sprintf("[%d]", i)
		switch {
		case !isAbsClean(b.Source):
			probs = append(probs, problem{at, fmt.Sprintf("source %q must be an absolute, clean path", b.Source)})
		case jail.CheckBindDest(b.Dest) != nil:
			probs = append(probs, problem{at, jail.CheckBindDest(b.Dest).Error()})
		case seen[b.Dest]:
			probs = append(probs, problem{at, fmt.Sprintf("destination %q is bound twice", b.Dest)})
		}
		seen[b.Dest] = true
	}
	return probs
}

func varsValue(v any) []problem {
	vars := *v.(*map[string]string)
	var probs []problem
	for _, n := range slices.Sorted(maps.Keys(vars)) {
		switch {
		case !isEnvName(n):
			probs = append(probs, problem{"." + n, fmt.Sprintf("%q is not a variable name ([A-Za-z_][A-Za-z0-9_]*)", n)})
		case strings.IndexByte(vars[n], 0) >= 0:
			probs = append(probs, problem{"." + n, "value contains a NUL byte"})
		}
	}
	return probs
}

// allowValue checks the allowlist with the proxy's own parser, so that a
// rule is judged the same here as where it is enforced.
func allowValue(v any) []problem {
	var probs []problem
	for i, e := range *v.(*[]string) {
		if _, err := netproxy.ParseRule(e); err != nil {
			probs = append(probs, problem{fmt.Sprintf("[%d]", i), err.Error()})
		}
	}
	return probs
}

func allowPrivateValue(v any) []problem {
	var probs []problem
	for i, e := range *v.(*[]string) {
		if _, err := netproxy.ParsePrivate([]string{e}); err != nil {
			probs = append(probs, problem{fmt.Sprintf("[%d]", i), err.Error()})
		}
	}
	return probs
}

func isAbsClean(p string) bool {
	return strings.HasPrefix(p, "/") && path.Clean(p) == p && strings.IndexByte(p, 0) < 0
}

func isEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

func quoteList(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = fmt.Sprintf("%q", x)
	}
	return strings.Join(q, ", ")
}
