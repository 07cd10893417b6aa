package profiles

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stockade/stockade/jail"
)

// Field names a profile field by its dotted TOML key. The names are part of
// stockade's interface: keep them stable.
type Field string

// The profile fields, in the order `stockade profile show` prints them.
const (
	FieldExtends     Field = "extends"
	FieldDescription Field = "description"

	FieldTimeout   Field = "limits.timeout"
	FieldCPUTime   Field = "limits.cpu_time"
	FieldMemory    Field = "limits.memory"
	FieldSwap      Field = "limits.swap"
	FieldCPUs      Field = "limits.cpus"
	FieldPids      Field = "limits.pids"
	FieldOpenFiles Field = "limits.open_files"
	FieldFileSize  Field = "limits.file_size"
	FieldOutput    Field = "limits.output"

	FieldRootfs    Field = "filesystem.rootfs"
	FieldTmpfsSize Field = "filesystem.tmpfs_size"
	FieldWorkSize  Field = "filesystem.work_size"
	FieldWorkdir   Field = "filesystem.workdir"
	FieldNoexec    Field = "filesystem.noexec"
	FieldRO        Field = "filesystem.ro"

	FieldEnvVars Field = "environment.vars"

	FieldSeccompPolicy Field = "seccomp.policy"
	FieldNetworkMode   Field = "network.mode"

	FieldNetworkAllow        Field = "network.allow"
	FieldNetworkAllowPrivate Field = "network.allow_private"
	FieldNetworkMaxTunnels   Field = "network.max_tunnels"
	FieldNetworkMaxUpload    Field = "network.max_upload"
	FieldNetworkMaxDownload  Field = "network.max_download"
)

// tables are the TOML tables a profile may have, in output order.
var tables = []string{"limits", "filesystem", "environment", "seccomp", "network"}

type kind int

const (
	kindString kind = iota
	kindSize
	kindDuration
	kindInt
	kindFloat
	kindBool
	kindBinds
	kindVars
	kindStrings // a list that a later layer replaces whole
)

// fieldSpec ties a Field to its kind, to where its value lives in a
// Profile (ptr returns a pointer of the Go type the kind implies), to the
// jail.Spec field it becomes, and to how a tighten-only layer may change it.
type fieldSpec struct {
	field Field
	kind  kind
	ptr   func(p *Profile) any
	// spec points at the jail.Spec field that Profile.Spec copies the value
	// into (converted to that field's type), so that a limit is declared
	// here once; nil for the fields with no single counterpart there,
	// which Profile.Spec turns into Spec fields itself.
	spec func(s *jail.Spec) any
	// tighten is how Tighten judges a value: only a field with a rule may
	// be set by a tighten-only layer (a server request).
	tighten tightenRule
}

// tightenRule says which of two values of a field is the tighter.
type tightenRule int

const (
	notTightenable  tightenRule = iota
	lowerIsTighter              // less is tighter (swap: 0 is no swap at all)
	lowerZeroIsNone             // less is tighter, but 0 is no limit at all
)

// schema is every field, in output order. It is never modified.
var schema = []fieldSpec{
	{FieldExtends, kindString, func(p *Profile) any { return &p.Extends }, nil, notTightenable},
	{FieldDescription, kindString, func(p *Profile) any { return &p.Description }, nil, notTightenable},
	{FieldTimeout, kindDuration, func(p *Profile) any { return &p.Limits.Timeout },
		func(s *jail.Spec) any { return &s.Timeout }, lowerIsTighter},
	{FieldCPUTime, kindDuration, func(p *Profile) any { return &p.Limits.CPUTime },
		func(s *jail.Spec) any { return &s.Cgroup.CPUTime }, lowerZeroIsNone},
	{FieldMemory, kindSize, func(p *Profile) any { return &p.Limits.Memory },
		func(s *jail.Spec) any { return &s.Cgroup.MemoryMax }, lowerIsTighter},
	{FieldSwap, kindSize, func(p *Profile) any { return &p.Limits.Swap },
		func(s *jail.Spec) any { return &s.Cgroup.SwapMax }, lowerIsTighter},
	{FieldCPUs, kindFloat, func(p *Profile) any { return &p.Limits.CPUs },
		func(s *jail.Spec) any { return &s.Cgroup.CPUs }, lowerIsTighter},
	{FieldPids, kindInt, func(p *Profile) any { return &p.Limits.Pids },
		func(s *jail.Spec) any { return &s.Cgroup.PidsMax }, lowerIsTighter},
	{FieldOpenFiles, kindInt, func(p *Profile) any { return &p.Limits.OpenFiles },
		func(s *jail.Spec) any { return &s.Rlimits.OpenFiles }, lowerIsTighter},
	{FieldFileSize, kindSize, func(p *Profile) any { return &p.Limits.FileSize },
		func(s *jail.Spec) any { return &s.Rlimits.FileSize }, lowerZeroIsNone},
	{FieldOutput, kindSize, func(p *Profile) any { return &p.Limits.Output },
		func(s *jail.Spec) any { return &s.OutputLimit }, lowerIsTighter},
	{FieldRootfs, kindString, func(p *Profile) any { return &p.Filesystem.Rootfs },
		func(s *jail.Spec) any { return &s.Rootfs }, notTightenable},
	{FieldTmpfsSize, kindSize, func(p *Profile) any { return &p.Filesystem.TmpfsSize },
		func(s *jail.Spec) any { return &s.TmpfsSize }, notTightenable},
	{FieldWorkSize, kindSize, func(p *Profile) any { return &p.Filesystem.WorkSize },
		func(s *jail.Spec) any { return &s.WorkSize }, notTightenable},
	{FieldWorkdir, kindString, func(p *Profile) any { return &p.Filesystem.Workdir }, nil, notTightenable},
	{FieldNoexec, kindBool, func(p *Profile) any { return &p.Filesystem.Noexec }, nil, notTightenable},
	{FieldRO, kindBinds, func(p *Profile) any { return &p.Filesystem.RO }, nil, notTightenable},
	{FieldEnvVars, kindVars, func(p *Profile) any { return &p.Environment.Vars }, nil, notTightenable},
	{FieldSeccompPolicy, kindString, func(p *Profile) any { return &p.Seccomp.Policy },
		func(s *jail.Spec) any { return &s.Seccomp }, notTightenable},
	{FieldNetworkMode, kindString, func(p *Profile) any { return &p.Network.Mode }, nil, notTightenable},
	{FieldNetworkAllow, kindStrings, func(p *Profile) any { return &p.Network.Allow },
		func(s *jail.Spec) any { return &s.Network.Allow }, notTightenable},
	{FieldNetworkAllowPrivate, kindStrings, func(p *Profile) any { return &p.Network.AllowPrivate },
		func(s *jail.Spec) any { return &s.Network.AllowPrivate }, notTightenable},
	{FieldNetworkMaxTunnels, kindInt, func(p *Profile) any { return &p.Network.MaxTunnels },
		func(s *jail.Spec) any { return &s.Network.MaxTunnels }, notTightenable},
	{FieldNetworkMaxUpload, kindSize, func(p *Profile) any { return &p.Network.MaxUpload },
		func(s *jail.Spec) any { return &s.Network.MaxUpload }, notTightenable},
	{FieldNetworkMaxDownload, kindSize, func(p *Profile) any { return &p.Network.MaxDownload },
		func(s *jail.Spec) any { return &s.Network.MaxDownload }, notTightenable},
}

// Fields returns every profile field in schema order.
func Fields() []Field {
	fs := make([]Field, len(schema))
	for i, s := range schema {
		fs[i] = s.field
	}
	return fs
}

func lookupSpec(f Field) (fieldSpec, bool) {
	for _, s := range schema {
		if s.field == f {
			return s, true
		}
	}
	return fieldSpec{}, false
}

// merge copies spec's field from over into m, per element for collections.
func (s fieldSpec) merge(m, over *Profile) {
	switch d := s.ptr(m).(type) {
	case *string:
		*d = *s.ptr(over).(*string)
	case *int64:
		*d = *s.ptr(over).(*int64)
	case *time.Duration:
		*d = *s.ptr(over).(*time.Duration)
	case *float64:
		*d = *s.ptr(over).(*float64)
	case *bool:
		*d = *s.ptr(over).(*bool)
	case *[]Bind:
		*d = mergeBinds(*d, *s.ptr(over).(*[]Bind))
	case *[]string:
		// An allowlist is replaced, never extended: a profile or flag that
		// names hosts means exactly those hosts.
		*d = slices.Clone(*s.ptr(over).(*[]string))
	case *map[string]string:
		merged := maps.Clone(*d)
		if merged == nil {
			merged = make(map[string]string)
		}
		maps.Copy(merged, *s.ptr(over).(*map[string]string))
		*d = merged
	}
}

// decode stores the TOML value v (as toml.PrimitiveDecode gives it into an
// any) into p's field. A bind list is appended to and a vars table merged
// into, so that decode also serves Set. The error is the message alone; the
// caller adds origin and field.
func (s fieldSpec) decode(p *Profile, v any) error {
	switch s.kind {
	case kindString:
		str, ok := v.(string)
		if !ok {
			return mustBe("a string", v)
		}
		*s.ptr(p).(*string) = str
	case kindSize:
		n, err := sizeValue(v)
		if err != nil {
			return err
		}
		*s.ptr(p).(*int64) = n
	case kindDuration:
		d, err := durationValue(v)
		if err != nil {
			return err
		}
		*s.ptr(p).(*time.Duration) = d
	case kindInt:
		n, ok := v.(int64)
		if !ok {
			return mustBe("an integer", v)
		}
		*s.ptr(p).(*int64) = n
	case kindFloat:
		switch n := v.(type) {
		case int64:
			*s.ptr(p).(*float64) = float64(n)
		case float64:
			// TOML has nan and inf; no limit is either.
			if math.IsNaN(n) || math.IsInf(n, 0) {
				return fmt.Errorf("must be a finite number, not %v", n)
			}
			*s.ptr(p).(*float64) = n
		default:
			return mustBe("a number", v)
		}
	case kindBool:
		b, ok := v.(bool)
		if !ok {
			return mustBe("true or false", v)
		}
		*s.ptr(p).(*bool) = b
	case kindStrings:
		elems, ok := v.([]any)
		if !ok {
			return mustBe("an array of strings", v)
		}
		list := make([]string, 0, len(elems))
		for _, e := range elems {
			str, ok := e.(string)
			if !ok {
				return mustBe("an array of strings", v)
			}
			list = append(list, str)
		}
		*s.ptr(p).(*[]string) = list
	case kindBinds:
		return fmt.Errorf("internal: binds are decoded per element")
	case kindVars:
		return fmt.Errorf("internal: vars are decoded per variable")
	}
	return nil
}

// Set sets field f from its text as a command-line flag gives it, recording
// origin o (say, Origin{File: "--memory"}): a size, duration, number, true or
// false, or string as the field's kind is. filesystem.ro takes one
// "SRC[:DST]" and appends it; environment.vars takes one "NAME=VALUE" and
// adds it. A layer is one source, so a destination or a variable given
// twice in it is an error, as a key given twice in a TOML file is. Values
// are checked as Parse checks them; ranges are left to Validate.
func (p *Profile) Set(f Field, value string, o Origin) error {
	spec, ok := lookupSpec(f)
	if !ok {
		return &Error{Origin: o, Field: string(f), Msg: "unknown field"}
	}
	fail := func(err error) error {
		return &Error{Origin: o, Field: string(f), Msg: err.Error()}
	}
	var v any = value
	switch spec.kind {
	case kindInt:
		n, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
		if err != nil {
			return fail(fmt.Errorf("%q is not an integer", value))
		}
		v = n
	case kindFloat:
		n, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return fail(fmt.Errorf("%q is not a number", value))
		}
		v = n
	case kindBool:
		b, err := strconv.ParseBool(strings.TrimSpace(value))
		if err != nil {
			return fail(fmt.Errorf("%q is not true or false", value))
		}
		v = b
	case kindStrings:
		// A flag may be repeated or comma-separated: each adds entries.
		list := spec.ptr(p).(*[]string)
		for _, e := range strings.Split(value, ",") {
			if e = strings.TrimSpace(e); e != "" {
				*list = append(*list, e)
			}
		}
		p.Mark(f, o)
		return nil
	case kindBinds:
		b, err := ParseBind(value)
		if err != nil {
			return fail(err)
		}
		if slices.ContainsFunc(p.Filesystem.RO, func(x Bind) bool { return x.Dest == b.Dest }) {
			return fail(fmt.Errorf("destination %q is bound twice", b.Dest))
		}
		p.Filesystem.RO = append(p.Filesystem.RO, b)
		p.Mark(f, o)
		return nil
	case kindVars:
		name, val, ok := strings.Cut(value, "=")
		if !ok {
			return fail(fmt.Errorf("%q is not NAME=VALUE", value))
		}
		if _, dup := p.Environment.Vars[name]; dup {
			return fail(fmt.Errorf("%s is given twice", name))
		}
		if err := decodeVar(p, name, val); err != nil {
			return fail(err)
		}
		p.Mark(f, o)
		return nil
	}
	if err := spec.decode(p, v); err != nil {
		return fail(err)
	}
	p.Mark(f, o)
	return nil
}

// decodeBind parses one filesystem.ro element and appends it to p.
func decodeBind(p *Profile, v any) error {
	str, ok := v.(string)
	if !ok {
		return mustBe("a string \"SRC[:DST]\"", v)
	}
	b, err := ParseBind(str)
	if err != nil {
		return err
	}
	// Merging goes per destination, so a second bind to the same one would
	// silently replace the first: say so instead.
	if slices.ContainsFunc(p.Filesystem.RO, func(x Bind) bool { return x.Dest == b.Dest }) {
		return fmt.Errorf("destination %q is bound twice", b.Dest)
	}
	p.Filesystem.RO = append(p.Filesystem.RO, b)
	return nil
}

// decodeVar stores one environment variable. Integers and booleans are
// accepted and written as TOML would, since OMP_NUM_THREADS = 1 is natural.
func decodeVar(p *Profile, name string, v any) error {
	var val string
	switch x := v.(type) {
	case string:
		val = x
	case int64:
		val = strconv.FormatInt(x, 10)
	case bool:
		val = strconv.FormatBool(x)
	default:
		return mustBe("a string", v)
	}
	if p.Environment.Vars == nil {
		p.Environment.Vars = make(map[string]string)
	}
	p.Environment.Vars[name] = val
	return nil
}

// ParseBind parses a read-only bind "SRC[:DST]"; DST defaults to SRC. Paths
// containing ':' cannot be expressed. Whether the paths are acceptable is
// Validate's business, so that flags and files are judged alike.
func ParseBind(s string) (Bind, error) {
	src, dst, ok := strings.Cut(s, ":")
	if !ok {
		dst = src
	}
	if src == "" || dst == "" {
		return Bind{}, fmt.Errorf("%q is not SRC[:DST]", s)
	}
	return Bind{Source: src, Dest: dst}, nil
}

func sizeValue(v any) (int64, error) {
	switch x := v.(type) {
	case string:
		return ParseSize(x)
	case int64:
		if x < 0 {
			return 0, fmt.Errorf("%d is a negative size", x)
		}
		return x, nil
	}
	return 0, mustBe("a size (\"512M\" or a number of bytes)", v)
}

func durationValue(v any) (time.Duration, error) {
	switch x := v.(type) {
	case string:
		return ParseDuration(x)
	case int64:
		if x < 0 {
			return 0, fmt.Errorf("%d is a negative duration", x)
		}
		if x > math.MaxInt64/int64(time.Second) {
			return 0, fmt.Errorf("%d is too long a duration", x)
		}
		return time.Duration(x) * time.Second, nil
	case float64:
		if math.IsNaN(x) || x < 0 {
			return 0, fmt.Errorf("%v is not a duration", x)
		}
		if x*float64(time.Second) >= math.MaxInt64 {
			return 0, fmt.Errorf("%v is too long a duration", x)
		}
		return time.Duration(x * float64(time.Second)), nil
	}
	return 0, mustBe("a duration (\"10s\" or a number of seconds)", v)
}

func mustBe(want string, got any) error {
	return fmt.Errorf("must be %s, not %s", want, tomlTypeName(got))
}

func tomlTypeName(v any) string {
	switch x := v.(type) {
	case string:
		return fmt.Sprintf("the string %q", x)
	case int64:
		return fmt.Sprintf("the integer %d", x)
	case float64:
		return fmt.Sprintf("the float %v", x)
	case bool:
		return fmt.Sprintf("%v", x)
	case map[string]any:
		return "a table"
	case []any, []map[string]any:
		return "an array"
	}
	return "a date or time"
}
