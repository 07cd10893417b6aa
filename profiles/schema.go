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

	// FieldIsolation is the tier ("jail" or "vm", docs/isolation.md);
	// FieldVMEmulate lets the VM tier run under software emulation where
	// the host has no /dev/kvm (--vm-emulate).
	FieldIsolation Field = "isolation"
	FieldVMEmulate Field = "vm_emulate"

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

// fieldSpec is one row of the schema: everything stockade knows about a
// field, so that a limit is declared once, here, and every door derives
// from the row: how a file, a flag or a request's value is read (kind),
// where it lives in a Profile (ptr), its bounds (check, for Validate), the
// jail.Spec field it becomes (spec, for Profile.Spec), the Result.Limits
// entry that reports it (result), how a tighten-only layer may change it
// (tighten, for Tighten and so for server requests and `run --server`) and
// its command-line flag (flag, usage). TestEverySchemaRowIsWired walks the
// rows and holds each to all of them.
type fieldSpec struct {
	field Field
	kind  kind
	ptr   func(p *Profile) any
	// check says what is wrong with the value (ptr's pointer), if
	// anything; Validate calls it for every row, set or not. nil only for
	// the fields any value of which is fine.
	check func(v any) []problem
	// spec points at the jail.Spec field that Profile.Spec copies the value
	// into (converted to that field's type); nil for the fields with no
	// single counterpart there, which Profile.Spec turns into Spec fields
	// itself.
	spec func(s *jail.Spec) any
	// result is the JSON name of the jail.Limits entry that reports the
	// Spec field (jail.Limits says which Spec field each entry reads); ""
	// for a field the result does not list among its limits.
	result string
	// tighten is how Tighten judges a value: only a field with a rule may
	// be set by a tighten-only layer (a server request).
	tighten tightenRule
	// flag is the name of the command-line flag that sets the field from
	// one value ("" when the field has none, or a flag of its own shape:
	// --ro, --env, --allow-net, --workdir); usage is its help.
	flag, usage string
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
	{field: FieldExtends, kind: kindString, ptr: func(p *Profile) any { return &p.Extends }},
	{field: FieldDescription, kind: kindString, ptr: func(p *Profile) any { return &p.Description }},
	{field: FieldIsolation, kind: kindString, ptr: func(p *Profile) any { return &p.Isolation },
		check: isolationValue, spec: func(s *jail.Spec) any { return &s.Isolation },
		flag: "isolation", usage: `isolation tier: "jail" (the host's kernel) or "vm" (a guest kernel of its own; docs/isolation.md)`},
	{field: FieldVMEmulate, kind: kindBool, ptr: func(p *Profile) any { return &p.VMEmulate }},

	{field: FieldTimeout, kind: kindDuration, ptr: func(p *Profile) any { return &p.Limits.Timeout },
		check: positive, spec: func(s *jail.Spec) any { return &s.Timeout }, result: "timeout_ms",
		tighten: lowerIsTighter, flag: "timeout", usage: "wall-clock limit (e.g. 500ms, 2s, 1m)"},
	{field: FieldCPUTime, kind: kindDuration, ptr: func(p *Profile) any { return &p.Limits.CPUTime },
		check: nonNegative, spec: func(s *jail.Spec) any { return &s.Cgroup.CPUTime }, result: "cpu_time_ms",
		tighten: lowerZeroIsNone, flag: "cpu-time", usage: "CPU time of the whole tree (0: none)"},
	{field: FieldMemory, kind: kindSize, ptr: func(p *Profile) any { return &p.Limits.Memory },
		check: sizeAtLeast(MinMemory), spec: func(s *jail.Spec) any { return &s.Cgroup.MemoryMax }, result: "memory_bytes",
		tighten: lowerIsTighter, flag: "memory", usage: "memory limit of the whole jail (cgroup)"},
	{field: FieldSwap, kind: kindSize, ptr: func(p *Profile) any { return &p.Limits.Swap },
		check: nonNegative, spec: func(s *jail.Spec) any { return &s.Cgroup.SwapMax }, result: "swap_bytes",
		tighten: lowerIsTighter, flag: "swap", usage: "swap allowed on top of --memory"},
	{field: FieldCPUs, kind: kindFloat, ptr: func(p *Profile) any { return &p.Limits.CPUs },
		check: floatIn(MinCPUs, MaxCPUs), spec: func(s *jail.Spec) any { return &s.Cgroup.CPUs }, result: "cpus",
		tighten: lowerIsTighter, flag: "cpus", usage: "CPU bandwidth in cores (cgroup quota)"},
	{field: FieldPids, kind: kindInt, ptr: func(p *Profile) any { return &p.Limits.Pids },
		check: intIn(MinPids, MaxPids), spec: func(s *jail.Spec) any { return &s.Cgroup.PidsMax }, result: "pids",
		tighten: lowerIsTighter, flag: "pids", usage: "most tasks (processes and threads) at once"},
	{field: FieldOpenFiles, kind: kindInt, ptr: func(p *Profile) any { return &p.Limits.OpenFiles },
		check: intIn(MinOpenFiles, MaxOpenFiles), spec: func(s *jail.Spec) any { return &s.Rlimits.OpenFiles }, result: "open_files",
		tighten: lowerIsTighter, flag: "open-files", usage: "RLIMIT_NOFILE"},
	{field: FieldFileSize, kind: kindSize, ptr: func(p *Profile) any { return &p.Limits.FileSize },
		check: nonNegative, spec: func(s *jail.Spec) any { return &s.Rlimits.FileSize }, result: "file_size_bytes",
		tighten: lowerZeroIsNone, flag: "file-size", usage: "largest file the jail may write (RLIMIT_FSIZE; 0: no limit)"},
	{field: FieldOutput, kind: kindSize, ptr: func(p *Profile) any { return &p.Limits.Output },
		check: positive, spec: func(s *jail.Spec) any { return &s.OutputLimit }, result: "output_bytes",
		tighten: lowerIsTighter, flag: "output-limit", usage: "bytes kept per output stream; the rest is dropped"},

	{field: FieldRootfs, kind: kindString, ptr: func(p *Profile) any { return &p.Filesystem.Rootfs },
		check: rootfsValue, spec: func(s *jail.Spec) any { return &s.Rootfs },
		flag: "rootfs", usage: `root filesystem: "host" (derived from the host) or a prepared directory`},
	{field: FieldTmpfsSize, kind: kindSize, ptr: func(p *Profile) any { return &p.Filesystem.TmpfsSize },
		check: positive, spec: func(s *jail.Spec) any { return &s.TmpfsSize }, result: "tmpfs_bytes",
		flag: "tmpfs-size", usage: "size of /tmp (and /dev/shm)"},
	{field: FieldWorkSize, kind: kindSize, ptr: func(p *Profile) any { return &p.Filesystem.WorkSize },
		check: positive, spec: func(s *jail.Spec) any { return &s.WorkSize }, result: "work_bytes",
		flag: "work-size", usage: "most a fresh /work holds: a tmpfs, counted in --memory"},
	{field: FieldWorkdir, kind: kindString, ptr: func(p *Profile) any { return &p.Filesystem.Workdir }, check: workdirValue},
	{field: FieldNoexec, kind: kindBool, ptr: func(p *Profile) any { return &p.Filesystem.Noexec }},
	{field: FieldRO, kind: kindBinds, ptr: func(p *Profile) any { return &p.Filesystem.RO }, check: bindsValue},

	{field: FieldEnvVars, kind: kindVars, ptr: func(p *Profile) any { return &p.Environment.Vars }, check: varsValue},

	{field: FieldSeccompPolicy, kind: kindString, ptr: func(p *Profile) any { return &p.Seccomp.Policy },
		check: seccompValue, spec: func(s *jail.Spec) any { return &s.Seccomp },
		flag: "seccomp", usage: `system call policy (python, strict), or "off"`},
	{field: FieldNetworkMode, kind: kindString, ptr: func(p *Profile) any { return &p.Network.Mode }, check: networkModeValue},

	{field: FieldNetworkAllow, kind: kindStrings, ptr: func(p *Profile) any { return &p.Network.Allow },
		check: allowValue, spec: func(s *jail.Spec) any { return &s.Network.Allow }},
	{field: FieldNetworkAllowPrivate, kind: kindStrings, ptr: func(p *Profile) any { return &p.Network.AllowPrivate },
		check: allowPrivateValue, spec: func(s *jail.Spec) any { return &s.Network.AllowPrivate }},
	{field: FieldNetworkMaxTunnels, kind: kindInt, ptr: func(p *Profile) any { return &p.Network.MaxTunnels },
		check: intIn(1, 4096), spec: func(s *jail.Spec) any { return &s.Network.MaxTunnels },
		flag: "net-max-tunnels", usage: "most proxy connections at once"},
	{field: FieldNetworkMaxUpload, kind: kindSize, ptr: func(p *Profile) any { return &p.Network.MaxUpload },
		check: positive, spec: func(s *jail.Spec) any { return &s.Network.MaxUpload },
		flag: "net-max-upload", usage: "bytes the jail may send through the proxy over the run"},
	{field: FieldNetworkMaxDownload, kind: kindSize, ptr: func(p *Profile) any { return &p.Network.MaxDownload },
		check: positive, spec: func(s *jail.Spec) any { return &s.Network.MaxDownload },
		flag: "net-max-download", usage: "bytes the jail may receive through the proxy over the run"},
}

// Flag is a command-line flag that sets one field from one value, as
// Profile.Set takes it.
type Flag struct {
	Name  string // without the dashes: "memory"
	Field Field
	Usage string
}

// Flags returns the flags the schema gives its fields, in schema order:
// the CLI makes one flag of each, so a field with a flag in its row is a
// flag of `stockade run` the day the row is written.
func Flags() []Flag {
	var fs []Flag
	for _, row := range schema {
		if row.flag != "" {
			fs = append(fs, Flag{Name: row.flag, Field: row.field, Usage: row.usage})
		}
	}
	return fs
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
