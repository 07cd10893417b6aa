package jail

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/jail/internal/jailinit"
	"golang.org/x/sys/unix"
)

// Verdict says why a run ended (api.Verdict, where the order of its
// constants is the order of precedence).
type Verdict = api.Verdict

const (
	VerdictError     = api.VerdictError
	VerdictCancelled = api.VerdictCancelled
	VerdictMemory    = api.VerdictMemory
	VerdictPids      = api.VerdictPids
	VerdictDisk      = api.VerdictDisk
	VerdictCPU       = api.VerdictCPU
	VerdictTimeout   = api.VerdictTimeout
	VerdictSeccomp   = api.VerdictSeccomp
	VerdictSignal    = api.VerdictSignal
	VerdictOutput    = api.VerdictOutput
	VerdictExit      = api.VerdictExit
	VerdictOK        = api.VerdictOK
)

// Exit statuses stockade uses for itself, after timeout(1) and env(1).
const (
	ExitTimeout      = 124
	ExitJailError    = jailinit.ExitJailError
	ExitCannotRun    = jailinit.ExitCannotRun
	ExitNotFound     = jailinit.ExitNotFound
	ExitSignalOffset = 128
	// ExitCancelled is the status of a run cancelled without a signal (a
	// library caller's context); one cancelled by a signal to stockade
	// ends with 128 plus that signal's number, as a shell reports it.
	ExitCancelled = ExitSignalOffset + int(syscall.SIGINT)
)

// CancelSignal, as the cause of Run's context (context.WithCancelCause),
// says which signal to stockade cancelled the run.
type CancelSignal struct{ Signal syscall.Signal }

func (c CancelSignal) Error() string {
	return fmt.Sprintf("stockade got %v", unix.SignalName(c.Signal))
}

// Result is what a run produced: its JSON form is the documented, stable
// `--json` output (api.Result).
type Result = api.Result

// CopyBack is what copy-back did with a --workdir's changes (api.CopyBack).
type CopyBack = api.CopyBack

// BlockedSyscall is one distinct system call the filter refused.
type BlockedSyscall = api.BlockedSyscall

// Limits are the effective limits of a run, read from the Spec that Run
// enforced (LimitsOf), so that a report never recomputes them: the fields
// and their tags are api.RunLimits'.
//
// Each field's spec tag names the Spec field it reports, and its null tag
// when it is null: "nocgroup" (Host.NoCgroup), "zero" (the Spec field is
// 0, no limit), "noworkdir" (no writable /work). A new limit is its field
// there with those tags: LimitsOf needs no line of its own
// (TestLimitsReportTheirSpecFields).
type Limits = api.RunLimits

// LimitsOf is what a run under s is held to: each Limits field set from
// the Spec field its tag names, or left null when its null tag says the
// limit is not applied. Without a cgroup nothing counts the tree's CPU
// time (newResult says what holds instead, in Degraded).
func LimitsOf(s Spec) Limits {
	var l Limits
	out := reflect.ValueOf(&l).Elem()
	in := reflect.ValueOf(s)
	for _, r := range limitReports() {
		v := in.FieldByIndex(r.spec)
		if r.null(s, v) {
			continue
		}
		if v.Type() == durationType {
			v = reflect.ValueOf(LimitMs(v.Interface().(time.Duration)))
		}
		f := out.Field(r.field)
		if f.Kind() == reflect.Pointer {
			f.Set(reflect.New(f.Type().Elem()))
			f = f.Elem()
		}
		f.Set(v.Convert(f.Type()))
	}
	return l
}

var durationType = reflect.TypeOf(time.Duration(0))

// LimitMs is d in whole milliseconds, rounded up, as every report of a
// limit gives it (Result.Limits, the server's audit log and sessions): a limit is
// never reported below what the jail enforced (a 500µs timeout is not
// "timeout_ms": 0, which reads as a limit of nothing).
func LimitMs(d time.Duration) int64 {
	ms := d.Milliseconds()
	if d > 0 && d%time.Millisecond != 0 {
		ms++
	}
	return ms
}

// limitReport is one Limits field's tags, resolved.
type limitReport struct {
	field int   // index in Limits
	spec  []int // index path in Spec
	nulls []string
}

func (r limitReport) null(s Spec, v reflect.Value) bool {
	for _, n := range r.nulls {
		switch {
		case n == "zero" && v.IsZero(),
			n == "nocgroup" && s.Host.NoCgroup,
			n == "noworkdir" && s.Workdir == "" && s.WorkdirMode != WorkdirFresh:
			return true
		}
	}
	return false
}

// limitReports resolves the tags once. A tag that names no Spec field, a
// null condition no one knows, a value that cannot be converted or a null
// tag on a field that cannot be null is a mistake in this file, which the
// tests (and the first run) find: it panics.
var limitReports = sync.OnceValue(func() []limitReport {
	lt, st := reflect.TypeOf(Limits{}), reflect.TypeOf(Spec{})
	var rs []limitReport
	for i := range lt.NumField() {
		f := lt.Field(i)
		r := limitReport{field: i}
		t, ok := st, false
		for _, name := range strings.Split(f.Tag.Get("spec"), ".") {
			var sf reflect.StructField
			if t.Kind() != reflect.Struct {
				ok = false
				break
			}
			if sf, ok = t.FieldByName(name); !ok {
				break
			}
			r.spec = append(r.spec, sf.Index...)
			t = sf.Type
		}
		if !ok {
			panic(fmt.Sprintf("jail.Limits.%s: spec tag %q names no Spec field", f.Name, f.Tag.Get("spec")))
		}
		want := f.Type
		if want.Kind() == reflect.Pointer {
			want = want.Elem()
		}
		from := t
		if from == durationType {
			from = reflect.TypeOf(int64(0))
		}
		if from.Kind() != want.Kind() {
			panic(fmt.Sprintf("jail.Limits.%s: cannot report Spec.%s (%v) as %v", f.Name, f.Tag.Get("spec"), t, want))
		}
		if nulls := f.Tag.Get("null"); nulls != "" {
			if f.Type.Kind() != reflect.Pointer {
				panic(fmt.Sprintf("jail.Limits.%s: null tag on a field that cannot be null", f.Name))
			}
			for _, n := range strings.Split(nulls, ",") {
				if n != "zero" && n != "nocgroup" && n != "noworkdir" {
					panic(fmt.Sprintf("jail.Limits.%s: unknown null condition %q", f.Name, n))
				}
				r.nulls = append(r.nulls, n)
			}
		}
		rs = append(rs, r)
	}
	return rs
})
