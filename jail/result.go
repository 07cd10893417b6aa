package jail

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/stockade/stockade/jail/internal/jailinit"
	"golang.org/x/sys/unix"
)

// Verdict says why a run ended. The order of the constants is the order of
// precedence when more than one applies: a fork bomb that also ran out of
// time is reported as "pids", because that is what the user has to fix;
// ending.verdict (verdict.go) is the one place that order is applied.
type Verdict string

const (
	VerdictError     Verdict = "error"     // the jail could not be set up
	VerdictCancelled Verdict = "cancelled" // the caller cancelled the run (SIGINT, SIGTERM or SIGHUP to stockade)
	VerdictMemory    Verdict = "memory"    // the kernel OOM-killed something in the jail
	VerdictPids      Verdict = "pids"      // fork or clone failed at the pids limit
	VerdictDisk      Verdict = "disk"      // /work was full (--work-size)
	VerdictCPU       Verdict = "cpu"       // the CPU-time limit ended the run
	VerdictTimeout   Verdict = "timeout"   // the wall-clock limit ended the run
	VerdictSeccomp   Verdict = "seccomp"   // a blocked system call killed the payload
	VerdictSignal    Verdict = "signal"    // the payload died of a signal
	VerdictOutput    Verdict = "output"    // output went past the limit and was cut
	VerdictExit      Verdict = "exit"      // the payload exited non-zero
	VerdictOK        Verdict = "ok"        // exit 0, nothing cut
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

// Result is what a run produced. Its JSON form is the documented,
// stable `--json` output: new fields may be added, none renamed.
type Result struct {
	Verdict  Verdict `json:"verdict"`
	ExitCode int     `json:"exit_code"`
	Signal   *int    `json:"signal"`

	WallMs float64 `json:"wall_ms"`
	UserMs float64 `json:"user_ms"`
	SysMs  float64 `json:"sys_ms"`
	CPUMs  float64 `json:"cpu_ms"`

	PeakMemoryBytes uint64 `json:"peak_memory_bytes"`
	PidsPeak        uint64 `json:"pids_peak,omitempty"`

	// WorkPeakBytes and WorkPeakInodes are the most /work's writable layer
	// held at once (a fresh /work, or the changes over a --workdir: bytes
	// written and not deleted; files, directories, links and whiteouts),
	// sampled every 50 ms and at the end; 0 with --no-workdir.
	WorkPeakBytes  uint64 `json:"work_peak_bytes"`
	WorkPeakInodes uint64 `json:"work_peak_inodes"`
	// CopyBackMs is how long stockade took, after the run, to copy a
	// --workdir's changes back; CopyBack.Ms, kept for callers that read
	// it here.
	CopyBackMs float64 `json:"copy_back_ms,omitempty"`
	// CopyBack is what copying a --workdir's changes back did; nil
	// without --workdir.
	CopyBack *CopyBack `json:"copy_back"`

	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdout_truncated"`
	StderrTruncated bool   `json:"stderr_truncated"`
	StdoutBytes     int64  `json:"stdout_bytes"`
	StderrBytes     int64  `json:"stderr_bytes"`

	// Limits are the limits the run ran under, as Run applied them.
	Limits Limits `json:"limits"`

	Cgroup          string           `json:"cgroup"`
	Seccomp         string           `json:"seccomp"`
	BlockedSyscalls []BlockedSyscall `json:"blocked_syscalls"`
	Degraded        []string         `json:"degraded"`
	// Network lists every network attempt of the run, allowed or not:
	// through the proxy, and direct ones the jail's namespace stopped.
	Network []NetworkDecision `json:"network"`

	Error           *string `json:"error"`
	StockadeVersion string  `json:"stockade_version"`

	// Phases is when each step of the run began, stockade's and init's,
	// in order, when Host.TracePhases asked (docs/performance.md); a
	// Prepared jail's are complete once Close returns.
	Phases []Phase `json:"phases,omitempty"`
}

// CopyBack is what copy-back did with a --workdir's changes after the
// run: all of them or, when it stopped, none (Stopped says why).
type CopyBack struct {
	Ms      float64 `json:"ms"`      // how long it took, its clean-up included
	Files   int     `json:"files"`   // entries written into DIR: files, directories, symlinks, hard links
	Bytes   int64   `json:"bytes"`   // data written into them
	Deleted int     `json:"deleted"` // entries of DIR removed as the jail removed them
	// Conflicts are changes of the jail's left out because the host
	// changed the same place during the run (the host's version stays), or
	// a mount point is there: "path: why".
	Conflicts []string `json:"conflicts"`
	// Skipped are entries of the jail's never copied back: symlinks that
	// lead out of DIR, fifos, sockets and devices.
	Skipped []string `json:"skipped"`
	// Stopped says why nothing was applied (a limit, the deadline, a
	// failure; DIR is then as it was, and the run's error says so too);
	// null when copy-back completed. Files, Bytes and Deleted are then 0.
	Stopped *string `json:"stopped"`
}

// BlockedSyscall is one distinct system call the filter refused.
type BlockedSyscall struct {
	Name    string `json:"name"`
	Count   int    `json:"count"`
	Example string `json:"example"`
}

// Limits are the effective limits of a run, read from the Spec that Run
// enforced (LimitsOf), so that a report never recomputes them. A null (nil)
// limit was not applied: no CPU-time or file-size limit was asked for, or
// there is no cgroup (--no-cgroup) to hold memory, CPU, CPU time and pids.
//
// Each field's spec tag names the Spec field it reports, and its null tag
// when it is null: "nocgroup" (Host.NoCgroup), "zero" (the Spec field is
// 0, no limit), "noworkdir" (no writable /work). A duration is reported in
// milliseconds, rounded up. A new limit is its field here with those tags: LimitsOf
// needs no line of its own (TestLimitsReportTheirSpecFields).
type Limits struct {
	TimeoutMs     int64    `json:"timeout_ms" spec:"Timeout"`
	CPUTimeMs     *int64   `json:"cpu_time_ms" spec:"Cgroup.CPUTime" null:"zero,nocgroup"`
	MemoryBytes   *int64   `json:"memory_bytes" spec:"Cgroup.MemoryMax" null:"nocgroup"`
	SwapBytes     *int64   `json:"swap_bytes" spec:"Cgroup.SwapMax" null:"nocgroup"`
	CPUs          *float64 `json:"cpus" spec:"Cgroup.CPUs" null:"nocgroup"`
	Pids          *int64   `json:"pids" spec:"Cgroup.PidsMax" null:"nocgroup"`
	OpenFiles     uint64   `json:"open_files" spec:"Rlimits.OpenFiles"`
	FileSizeBytes *uint64  `json:"file_size_bytes" spec:"Rlimits.FileSize" null:"zero"`
	OutputBytes   int64    `json:"output_bytes" spec:"OutputLimit"`
	TmpfsBytes    int64    `json:"tmpfs_bytes" spec:"TmpfsSize"`
	WorkBytes     *int64   `json:"work_bytes" spec:"WorkSize" null:"noworkdir"` // what /work may hold; null for --no-workdir
}

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
