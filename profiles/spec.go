package profiles

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/stockade/stockade/jail"
)

// Hostname is the jail's host name; no profile field changes it.
const Hostname = "stockade"

// threadVars are the thread-pool sizes of OpenBLAS, OpenMP and MKL. Each
// starts one thread per host core unless told otherwise, which under a pids
// limit and a CPU quota kills `import numpy` or thrashes; Spec sets them to
// the CPUs the run has unless the profile names them itself.
var threadVars = []string{"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"}

// Spec turns a validated profile into the jail's complete plain data, for
// a run of args on host. It is the one function in stockade that builds a
// jail.Spec: the CLI, the server (per request, after Tighten), the
// selftest (per attack) and doctor all come through here, so that a value
// reaches the jail only after Validate has seen it. Each schema row that
// points at a Spec field is copied by that row; the rest are the fields
// with no single counterpart, set below. A new limit is therefore its
// schema row and its Spec field, not a line here.
func (p *Profile) Spec(args []string, host jail.Host) jail.Spec {
	s := jail.Spec{
		Args:        slices.Clone(args),
		Env:         p.env(),
		WorkdirMode: jail.WorkdirFresh,
		ExecWorkdir: !p.Filesystem.Noexec,
		Hostname:    Hostname,
		VMEmulate:   p.VMEmulate,
		Host:        host,
	}
	for _, row := range schema {
		if row.spec != nil {
			copyValue(row.spec(&s), row.ptr(p))
		}
	}
	switch fs := p.Filesystem; fs.Workdir {
	case WorkdirFresh:
	case WorkdirNone:
		s.WorkdirMode = jail.WorkdirNone
	default:
		s.Workdir = fs.Workdir
	}
	for _, b := range p.Filesystem.RO {
		s.ReadOnly = append(s.ReadOnly, jail.Bind{Source: b.Source, Dest: b.Dest})
	}
	return s
}

// copyValue stores a profile value (src, a pointer of its kind's Go type)
// into a jail.Spec field (dst) of the type the jail counts it in. Validate
// has checked the value's range, so the conversions keep it. A pair of
// types not listed is a schema row pointing at the wrong field, which
// TestSpecSetsEveryPointedField catches.
func copyValue(dst, src any) {
	switch d := dst.(type) {
	case *string:
		*d = *src.(*string)
	case *time.Duration:
		*d = *src.(*time.Duration)
	case *float64:
		*d = *src.(*float64)
	case *int64:
		*d = *src.(*int64)
	case *uint64:
		*d = uint64(*src.(*int64))
	case *int:
		*d = int(*src.(*int64))
	case *[]string:
		*d = slices.Clone(*src.(*[]string))
	default:
		panic(fmt.Sprintf("internal: no copy from %T to %T", src, dst))
	}
}

// env is the profile's variables, sorted, plus the thread-pool sizes.
func (p *Profile) env() []string {
	vars := make(map[string]string, len(p.Environment.Vars)+len(threadVars))
	threads := strconv.Itoa(int(math.Ceil(p.Limits.CPUs)))
	for _, k := range threadVars {
		vars[k] = threads
	}
	for k, v := range p.Environment.Vars {
		vars[k] = v
	}
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	env := make([]string, len(keys))
	for i, k := range keys {
		env[i] = k + "=" + vars[k]
	}
	return env
}
