package seccomp

import (
	"encoding/json"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// syscallLoop times 200000 rounds of os.getpid() and os.stat() inside
// Python and prints nanoseconds per round: the cost of allowed calls, which
// the kernel's seccomp action cache should make nearly free.
const syscallLoop = `
import os, time
n = 200000
getpid, stat = os.getpid, os.stat
t = time.perf_counter_ns()
for _ in range(n):
    getpid(); stat("/")
print((time.perf_counter_ns() - t) / n)
`

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// sideBySide measures b.N times without a filter and under the python
// policy, alternating so that both see the same load, and reports the
// medians in unit and their ratio.
func sideBySide(b *testing.B, unit string, measure func(policy string) float64) {
	var off, on []float64
	for i := 0; i < b.N; i++ {
		off = append(off, measure("off"))
		on = append(on, measure("python"))
	}
	b.ReportMetric(median(off), unit+"-unfiltered")
	b.ReportMetric(median(on), unit+"-filtered")
	b.ReportMetric(median(on)/median(off), "ratio")
}

// BenchmarkAllowedSyscalls runs the loop without a filter and under the
// python policy, alternating, and reports the medians and their ratio.
func BenchmarkAllowedSyscalls(b *testing.B) {
	requirePython(b)
	args := pythonArgs(b, syscallLoop)
	sideBySide(b, "ns/round", func(policy string) float64 {
		run := runHelper(b, "exec", policy, args)
		if run.Err != nil {
			b.Fatalf("%s: %v\n%s", policy, run.Err, run.Stderr)
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(string(run.Stdout)), 64)
		if err != nil {
			b.Fatalf("%s: output %q", policy, run.Stdout)
		}
		return v
	})
}

// BenchmarkPythonStartup is the per-run cost: python3 -I -c pass forked from
// the helper, without a filter and with Load plus the supervisor.
func BenchmarkPythonStartup(b *testing.B) {
	requirePython(b)
	args, _ := json.Marshal([]string{"-I", "-c", "pass"})
	sideBySide(b, "µs/run", func(policy string) float64 {
		start := time.Now()
		run := runHelper(b, "exec", policy, string(args))
		if run.Err != nil {
			b.Fatalf("%s: %v\n%s", policy, run.Err, run.Stderr)
		}
		return float64(time.Since(start).Microseconds())
	})
}

func BenchmarkCompile(b *testing.B) {
	p, _ := Lookup("python")
	for i := 0; i < b.N; i++ {
		if _, err := Compile(p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoadProgram installs a compiled program; each iteration uses a
// fresh thread (the filters of one thread add up towards the kernel's
// limit), so the figure includes creating and ending one OS thread.
func BenchmarkLoadProgram(b *testing.B) {
	p, _ := Lookup("python")
	prog, err := Compile(p)
	if err != nil {
		b.Fatal(err)
	}
	benchLoad(b, prog.Load)
}

// BenchmarkLoad is Load as the jail calls it: compile and install.
func BenchmarkLoad(b *testing.B) {
	p, _ := Lookup("python")
	benchLoad(b, func() (int, error) { return Load(p) })
}

func benchLoad(b *testing.B, load func() (int, error)) {
	errc := make(chan error)
	for i := 0; i < b.N; i++ {
		go func() {
			runtime.LockOSThread() // never unlocked: the filtered thread dies with us
			if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
				errc <- err
				return
			}
			fd, err := load()
			if err == nil {
				err = unix.Close(fd)
			}
			errc <- err
		}()
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
	}
}
