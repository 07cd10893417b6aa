package jail

import (
	"bytes"
	"cmp"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/stockade/stockade/jail/internal/jailinit"
	"golang.org/x/sys/unix"
)

// phaseTrace is when each step of a run began, stockade's and init's, on
// CLOCK_MONOTONIC (Host.TracePhases; Result.Phases). A nil trace records
// nothing: a run that did not ask reads no clock for it. Init's marks
// arrive on the goroutine that reads its reports, hence the lock.
type phaseTrace struct {
	mu    sync.Mutex
	marks []jailinit.Mark
}

// maxMarks bounds what init may add: its steps, a few times over.
const maxMarks = 256

func newPhaseTrace(on bool) *phaseTrace {
	if !on {
		return nil
	}
	return &phaseTrace{}
}

func (t *phaseTrace) mark(name string) {
	if t != nil {
		now := jailinit.MonoNow()
		t.mu.Lock()
		t.marks = append(t.marks, jailinit.Mark{Name: name, Mono: now})
		t.mu.Unlock()
	}
}

func (t *phaseTrace) add(m []jailinit.Mark) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.marks)+len(m) <= maxMarks {
		t.marks = append(t.marks, m...)
	}
}

// phases are the marks in the order they happened, as offsets from the
// process's start.
func (t *phaseTrace) phases() []Phase {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	m := slices.Clone(t.marks)
	t.mu.Unlock()
	slices.SortStableFunc(m, func(a, b jailinit.Mark) int { return cmp.Compare(a.Mono, b.Mono) })
	out := make([]Phase, len(m))
	for i, x := range m {
		out[i] = PhaseAt(x.Name, x.Mono)
	}
	return out
}

// processStart is when this process started, on CLOCK_MONOTONIC in
// nanoseconds: the kernel's start time in /proc/self/stat, which counts
// clock ticks (10 ms) of CLOCK_BOOTTIME, moved to CLOCK_MONOTONIC (the two
// differ by the time the host spent suspended). The tick makes it up to
// 10 ms early; every later difference is exact. Where /proc cannot tell,
// it is the first call's own time.
var processStart = sync.OnceValue(func() int64 {
	var boot unix.Timespec
	mono := jailinit.MonoNow()
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &boot) != nil {
		return mono
	}
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return mono
	}
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(f) < 20 {
		return mono
	}
	ticks, err := strconv.ParseInt(f[19], 10, 64) // field 22, starttime
	if err != nil {
		return mono
	}
	return ticks*10_000_000 - (boot.Nano() - mono) // USER_HZ is 100 on every Linux
})

func monotonicNow() int64 { return jailinit.MonoNow() }
