package profiles

import (
	"errors"
	"fmt"
	"math"
	"path"
	"slices"
	"sort"
	"strings"

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
	MinPids      = 16
	MaxPids      = 4194304
	MinOpenFiles = 3 // stdin, stdout, stderr
	MaxOpenFiles = 1 << 20
)

// Validate checks every field's value, whether set or not (an unset field
// is zero, and a zero timeout is as dangerous unset as set), and returns all
// the problems joined, each an *Error naming where the bad value came from.
// Load validates what it returns; call Validate again after merging flags.
func (p *Profile) Validate() error {
	v := validator{p: p}
	l := p.Limits
	v.check(FieldTimeout, l.Timeout > 0, "must be more than 0")
	v.check(FieldMemory, l.Memory >= MinMemory, "%s is below the minimum of %s (a missing unit?)", FormatSize(l.Memory), FormatSize(MinMemory))
	v.check(FieldCPUs, l.CPUs >= MinCPUs && l.CPUs <= MaxCPUs && !math.IsNaN(l.CPUs), "%v is not in [%v, %d]", l.CPUs, MinCPUs, MaxCPUs)
	v.check(FieldPids, l.Pids >= MinPids && l.Pids <= MaxPids, "%d is not in [%d, %d]", l.Pids, MinPids, MaxPids)
	v.check(FieldOpenFiles, l.OpenFiles >= MinOpenFiles && l.OpenFiles <= MaxOpenFiles, "%d is not in [%d, %d]", l.OpenFiles, MinOpenFiles, MaxOpenFiles)
	v.check(FieldOutput, l.Output > 0, "must be more than 0")
	// Negative sizes and durations cannot be parsed, but Go code can set them.
	v.check(FieldCPUTime, l.CPUTime >= 0, "must not be negative")
	v.check(FieldSwap, l.Swap >= 0, "must not be negative")
	v.check(FieldFileSize, l.FileSize >= 0, "must not be negative")

	fs := p.Filesystem
	v.check(FieldRootfs, fs.Rootfs == RootfsHost || isAbsClean(fs.Rootfs), "%q must be %q or an absolute, clean path", fs.Rootfs, RootfsHost)
	v.check(FieldTmpfsSize, fs.TmpfsSize > 0, "must be more than 0")
	v.check(FieldWorkSize, fs.WorkSize > 0, "must be more than 0")
	v.check(FieldWorkdir, fs.Workdir == WorkdirFresh || fs.Workdir == WorkdirNone || (isAbsClean(fs.Workdir) && fs.Workdir != "/"),
		"%q must be %q, %q or an absolute, clean path other than /", fs.Workdir, WorkdirFresh, WorkdirNone)
	v.binds(fs.RO)
	v.vars(p.Environment.Vars)

	v.check(FieldSeccompPolicy, slices.Contains(SeccompPolicies(), p.Seccomp.Policy),
		"%q must be one of %s", p.Seccomp.Policy, quoteList(SeccompPolicies()))
	v.check(FieldNetworkMode, p.Network.Mode == NetworkNone, "%q must be %q (the only mode for now)", p.Network.Mode, NetworkNone)
	v.network(p.Network)
	return errors.Join(v.errs...)
}

type validator struct {
	p    *Profile
	errs []error
}

func (v *validator) check(f Field, ok bool, format string, args ...any) {
	if !ok {
		v.fail(string(f), f, fmt.Sprintf(format, args...))
	}
}

func (v *validator) fail(name string, f Field, msg string) {
	o, _ := v.p.Origin(f)
	v.errs = append(v.errs, &Error{Origin: o, Field: name, Msg: msg})
}

func (v *validator) binds(binds []Bind) {
	seen := make(map[string]bool)
	for i, b := range binds {
		name := fmt.Sprintf("%s[%d]", FieldRO, i)
		switch {
		case !isAbsClean(b.Source):
			v.fail(name, FieldRO, fmt.Sprintf("source %q must be an absolute, clean path", b.Source))
		case jail.CheckBindDest(b.Dest) != nil:
			v.fail(name, FieldRO, jail.CheckBindDest(b.Dest).Error())
		case seen[b.Dest]:
			v.fail(name, FieldRO, fmt.Sprintf("destination %q is bound twice", b.Dest))
		}
		seen[b.Dest] = true
	}
}

func (v *validator) vars(vars map[string]string) {
	names := make([]string, 0, len(vars))
	for n := range vars {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		name := fmt.Sprintf("%s.%s", FieldEnvVars, n)
		switch {
		case !isEnvName(n):
			v.fail(name, FieldEnvVars, fmt.Sprintf("%q is not a variable name ([A-Za-z_][A-Za-z0-9_]*)", n))
		case strings.IndexByte(vars[n], 0) >= 0:
			v.fail(name, FieldEnvVars, "value contains a NUL byte")
		}
	}
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

// network checks the allowlist with the proxy's own parser, so that a rule
// is judged the same here as where it is enforced.
func (v *validator) network(n Network) {
	for i, e := range n.Allow {
		if _, err := netproxy.ParseRule(e); err != nil {
			v.fail(fmt.Sprintf("%s[%d]", FieldNetworkAllow, i), FieldNetworkAllow, err.Error())
		}
	}
	for i, e := range n.AllowPrivate {
		if _, err := netproxy.ParsePrivate([]string{e}); err != nil {
			v.fail(fmt.Sprintf("%s[%d]", FieldNetworkAllowPrivate, i), FieldNetworkAllowPrivate, err.Error())
		}
	}
	v.check(FieldNetworkMaxTunnels, n.MaxTunnels >= 1 && n.MaxTunnels <= 4096, "%d is not in [1, 4096]", n.MaxTunnels)
	v.check(FieldNetworkMaxUpload, n.MaxUpload > 0, "must be more than 0")
	v.check(FieldNetworkMaxDownload, n.MaxDownload > 0, "must be more than 0")
}
