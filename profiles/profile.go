package profiles

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// Profile is a run's whole policy. Its exported fields are plain data; which
// of them were set, and where, is recorded beside them so that [Merge] can
// work field by field and errors can point at the line a value came from.
type Profile struct {
	// Name is what the profile was loaded as: a built-in name, a profile
	// name from the search path, or a file path. It is not a TOML field.
	Name string

	Extends     string
	Description string
	// Isolation is the tier, IsolationJail or IsolationVM; VMEmulate lets
	// the VM tier run without KVM (software emulation, slow).
	Isolation   string
	VMEmulate   bool
	Limits      Limits
	Filesystem  Filesystem
	Environment Environment
	Seccomp     Seccomp
	Network     Network

	// set maps each field that was given a value to where it was given.
	set map[Field]Origin
}

// Limits are the resource limits of a run.
type Limits struct {
	Timeout   time.Duration // wall clock
	CPUTime   time.Duration // 0 = no limit
	Memory    int64         // bytes
	Swap      int64         // bytes; 0 = no swap
	CPUs      float64       // CPUs' worth of time
	Pids      int64
	OpenFiles int64
	FileSize  int64 // bytes; 0 = no limit
	Output    int64 // bytes kept per stream
}

// Filesystem describes the jail's filesystem.
type Filesystem struct {
	Rootfs    string // RootfsHost or an absolute directory
	TmpfsSize int64  // bytes
	WorkSize  int64  // bytes a fresh /work holds (a tmpfs charged to the memory limit)
	Workdir   string // WorkdirFresh, WorkdirNone or an absolute host directory
	Noexec    bool
	RO        []Bind
}

// Bind is a read-only bind mount of a host path into the jail.
type Bind struct {
	Source string // host path, absolute
	Dest   string // path in the jail, absolute
}

// String returns the bind in the SRC[:DST] form the TOML and flags use.
func (b Bind) String() string {
	if b.Source == b.Dest {
		return b.Source
	}
	return b.Source + ":" + b.Dest
}

// Environment holds variables added to the jail's fixed environment.
type Environment struct {
	Vars map[string]string
}

// Seccomp selects the syscall filter.
type Seccomp struct {
	Policy string // one of SeccompPolicies()
}

// Network selects the network the jail sees. Mode "none" is the jail's
// namespace: loopback and no route out. Allow lists what the egress proxy
// may reach from it; empty, there is no proxy at all.
type Network struct {
	Mode         string   // NetworkNone
	Allow        []string // allowlist entries (see netproxy.ParseRule)
	AllowPrivate []string // private ranges a listed host may resolve to
	MaxTunnels   int64    // proxy connections at once
	MaxUpload    int64    // bytes from the jail over the run
	MaxDownload  int64    // bytes to the jail over the run
}

// Values with a meaning of their own.
const (
	RootfsHost   = "host"
	WorkdirFresh = "fresh"
	WorkdirNone  = "none"
	NetworkNone  = "none"
)

// The seccomp.policy values; the seccomp package owns what each allows.
const (
	SeccompPython = "python" // the default: what CPython and a shell need
	SeccompStrict = "strict" // the tightest filter, for code from strangers
	SeccompOff    = "off"    // no filter; namespaces and limits only
)

// SeccompPolicies returns the valid seccomp.policy values, the default first.
func SeccompPolicies() []string { return []string{SeccompPython, SeccompStrict, SeccompOff} }

// Origin is where a field's value came from: a file and line, or something
// like a flag name (Line 0).
type Origin struct {
	File string
	Line int
}

// IsFlag reports whether the value came from a command-line flag.
func (o Origin) IsFlag() bool { return o.Line == 0 && strings.HasPrefix(o.File, "--") }

func (o Origin) String() string {
	if o.Line > 0 {
		return fmt.Sprintf("%s:%d", o.File, o.Line)
	}
	return o.File
}

// Error is one problem with a profile. Its text is
// "ORIGIN: FIELD: MESSAGE", with the parts that are unknown left out.
type Error struct {
	Origin Origin
	Field  string // a dotted TOML key, possibly with an index: filesystem.ro[1]
	Msg    string
}

func (e *Error) Error() string {
	s := e.Msg
	// A flag names its field already: "--memory: ..." says it all.
	if e.Field != "" && !e.Origin.IsFlag() {
		s = e.Field + ": " + s
	}
	if o := e.Origin.String(); o != "" {
		s = o + ": " + s
	}
	return s
}

// IsSet reports whether f was given a value.
func (p *Profile) IsSet(f Field) bool {
	_, ok := p.set[f]
	return ok
}

// Origin returns where f's value came from.
func (p *Profile) Origin(f Field) (Origin, bool) {
	o, ok := p.set[f]
	return o, ok
}

// Mark records that f was set, from o. Code that assigns a field directly
// calls Mark so that Merge carries the value over.
func (p *Profile) Mark(f Field, o Origin) {
	if p.set == nil {
		p.set = make(map[Field]Origin)
	}
	p.set[f] = o
}

// SetFields returns the fields that were set, in schema order.
func (p *Profile) SetFields() []Field {
	var fs []Field
	for _, spec := range schema {
		if p.IsSet(spec.field) {
			fs = append(fs, spec.field)
		}
	}
	return fs
}

// Clone returns a deep copy of p.
func (p *Profile) Clone() *Profile {
	c := *p
	c.Filesystem.RO = slices.Clone(p.Filesystem.RO)
	c.Environment.Vars = maps.Clone(p.Environment.Vars)
	c.Network.Allow = slices.Clone(p.Network.Allow)
	c.Network.AllowPrivate = slices.Clone(p.Network.AllowPrivate)
	c.set = maps.Clone(p.set)
	return &c
}

// Merge returns base overridden, field by field, by the fields set in over.
// environment.vars merges per variable and filesystem.ro per destination.
// Neither argument is modified; the result's Name and Extends are over's.
func Merge(base, over *Profile) *Profile {
	m := base.Clone()
	m.Name, m.Extends = over.Name, over.Extends
	for _, spec := range schema {
		o, ok := over.set[spec.field]
		if !ok {
			continue
		}
		spec.merge(m, over)
		m.Mark(spec.field, o)
	}
	return m
}

// mergeBinds appends over's binds to base's, an over bind replacing a base
// bind with the same destination in place so that order stays stable.
func mergeBinds(base, over []Bind) []Bind {
	out := slices.Clone(base)
	for _, b := range over {
		if i := slices.IndexFunc(out, func(x Bind) bool { return x.Dest == b.Dest }); i >= 0 {
			out[i] = b
		} else {
			out = append(out, b)
		}
	}
	return out
}

// Defaults returns the profile every chain of extends starts from: the
// built-in python profile, which sets every field. It is the one place
// stockade's defaults live; the flags' help and docs/cli.md are tested
// against it.
func Defaults() *Profile {
	p, err := builtinPython()
	if err != nil {
		// Embedded at build time and parsed by TestBuiltins: not input.
		panic("built-in python profile: " + err.Error())
	}
	d := p.Clone()
	d.Name = "python"
	return d
}

// builtinPython is the built-in python profile as parsed, once per process.
// A run needs it three times (the flags' help, the base of every chain, and
// the default profile itself) and each parse costs 0.3-0.5 ms of a run's
// start-up, most of it the TOML library working out each key's line. It is
// embedded, so the value never changes; it is never handed out, only
// clones of it (Defaults, Load).
var builtinPython = sync.OnceValues(func() (*Profile, error) {
	return Parse(builtinPythonID+".toml", pythonTOML())
})

// builtinPythonID is the source id of the built-in python profile.
const builtinPythonID = "builtin:python"
