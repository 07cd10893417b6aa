package main

import (
	"encoding/json"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/stockade/stockade/internal/testenv"
	"github.com/stockade/stockade/jail"
)

// The everyday tasks of model-written Python, each in the default jail (the
// built-in python profile, as `stockade run` gives it), each with nothing
// refused and nothing on stderr.

func needModules(t *testing.T, mods ...string) {
	t.Helper()
	for _, m := range mods {
		if err := exec.Command("/usr/bin/python3", "-c", "import "+m).Run(); err != nil {
			t.Skipf("needs Debian's python3-%s (make check installs it)", m)
		}
	}
}

// runJSON runs args in the default jail with --json and returns the result,
// failing the test unless the run was ok with nothing refused and stderr
// empty.
func runJSON(t *testing.T, args ...string) jail.Result {
	t.Helper()
	code, out, errs := invoke(t, "", append([]string{"run", "--json"}, args...)...)
	var r jail.Result
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("exit %d: not a JSON result: %v\n%s\n%s", code, err, out, errs)
	}
	if r.Verdict != jail.VerdictOK || code != 0 {
		t.Fatalf("verdict %s exit %d\nstdout:\n%s\nstderr:\n%s", r.Verdict, code, tail(r.Stdout, 3000), tail(r.Stderr, 3000))
	}
	if len(r.BlockedSyscalls) != 0 {
		t.Errorf("refused calls: %+v", r.BlockedSyscalls)
	}
	if errs = ofThisRun(errs); r.Stderr != "" || errs != "" {
		t.Errorf("stderr not clean:\n%s%s", r.Stderr, errs)
	}
	return r
}

// ofThisRun drops what stockade said of other runs: the notice that it
// swept a dead stockade's leftovers is right whenever another test (or
// another engineer's) killed one, and says nothing of this run.
func ofThisRun(errs string) string {
	var keep []string
	for _, l := range strings.SplitAfter(errs, "\n") {
		if !strings.HasPrefix(l, "stockade: removed the leftovers of a stockade that died") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "")
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// workdirFor makes a directory the jail may write as its --workdir: owned
// by an unprivileged user when stockade runs as root (the jail acts as the
// directory's owner, never as root).
func workdirFor(t *testing.T) string {
	t.Helper()
	dir := reachable(t)
	if os.Geteuid() == 0 {
		if err := os.Chown(dir, 4242, 4242); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// reachable is a temporary directory the jail user can reach (mount sources
// are opened as the jail user).
func reachable(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestDataPandasGroupByFromReadOnlyCSV(t *testing.T) {
	testenv.NeedJail(t)
	needModules(t, "pandas")
	data := reachable(t)
	csv := "city,year,sales\nOslo,2024,10\nLima,2024,7\nOslo,2025,5\nLima,2025,1\nOslo,2025,2\n"
	if err := os.WriteFile(filepath.Join(data, "sales.csv"), []byte(csv), 0o644); err != nil {
		t.Fatal(err)
	}
	work := workdirFor(t)
	runJSON(t, "--ro", data+":/data", "--workdir", work, "--", "python3", "-c", `
import pandas as pd
df = pd.read_csv("/data/sales.csv")
df.groupby("city")["sales"].agg(["sum", "count"]).to_csv("totals.csv")
`)
	got, err := os.ReadFile(filepath.Join(work, "totals.csv"))
	if want := "city,sum,count\nLima,8,2\nOslo,17,3\n"; err != nil || string(got) != want {
		t.Fatalf("totals.csv = %q (%v), want %q", got, err, want)
	}
}

func TestDataMatplotlibChartIsAPNG(t *testing.T) {
	testenv.NeedJail(t)
	needModules(t, "matplotlib")
	work := workdirFor(t)
	r := runJSON(t, "--workdir", work, "--", "python3", "-c", `
import matplotlib, os
import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(4, 3), dpi=100)
ax.bar(["a", "b", "c"], [3, 1, 2]); ax.set_title("sales")
fig.savefig("chart.png")
print(matplotlib.get_backend(), os.environ.get("MPLCONFIGDIR"))
`)
	// Agg from the profile; the font cache stockade built, not a rebuild
	// (a rebuild would also say so on stderr, which runJSON checks).
	if r.Stdout != "agg /tmp/matplotlib\n" {
		t.Errorf("backend and config dir: %q", r.Stdout)
	}
	f, err := os.Open(filepath.Join(work, "chart.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("chart.png does not decode: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 400 || b.Dy() != 300 {
		t.Errorf("chart.png is %dx%d, want 400x300", b.Dx(), b.Dy())
	}
}

func TestDataNumpyMatmulUsesBLASThreads(t *testing.T) {
	testenv.NeedJail(t)
	needModules(t, "numpy")
	// With --cpus 2 the jail may use two threads; OpenBLAS starts its pool
	// (and mbinds its buffers, which the policy allows) on the first
	// large product.
	r := runJSON(t, "--cpus", "2", "--", "python3", "-c", `
import os, numpy as np
a = np.random.default_rng(0).random((800, 800))
c = a @ a.T
assert c.shape == (800, 800) and abs(c[0, 0] - (a[0] ** 2).sum()) < 1e-9
threads = int([l for l in open("/proc/self/status") if l.startswith("Threads:")][0].split()[1])
print(os.cpu_count(), threads)
`)
	if r.Stdout != "2 2\n" {
		t.Errorf("cpu_count and threads after a matmul under --cpus 2: %q, want \"2 2\"", r.Stdout)
	}
}

func TestDataMultiprocessingPoolSizedByCPUs(t *testing.T) {
	testenv.NeedJail(t)
	for _, c := range []struct{ cpus, want string }{{"1", "1"}, {"0.5", "1"}, {"2", "2"}} {
		r := runJSON(t, "--cpus", c.cpus, "--", "python3", "-c", `
import multiprocessing, os
def sq(x):
    return x * x
with multiprocessing.Pool() as p:
    assert p.map(sq, range(20)) == [x * x for x in range(20)]
    print(p._processes)
`)
		if strings.TrimSpace(r.Stdout) != c.want {
			t.Errorf("--cpus %s: Pool() started %q workers, want %s", c.cpus, r.Stdout, c.want)
		}
	}
}

func TestJailSeesItsOwnLimits(t *testing.T) {
	testenv.NeedJail(t)
	r := runJSON(t, "--memory", "300M", "--swap", "64M", "--cpus", "1", "--", "python3", "-c", `
import multiprocessing, os
m = {l.split(":")[0]: l.split()[1] for l in open("/proc/meminfo")}
print(m["MemTotal"], m["MemFree"], m["MemAvailable"], m["SwapTotal"])
print(os.cpu_count(), len(os.sched_getaffinity(0)), multiprocessing.cpu_count(), os.sysconf("SC_NPROCESSORS_ONLN"))
`)
	want := fmt.Sprintf("%d %d %d %d\n1 1 1 1\n", 300<<10, 300<<10, 300<<10, 64<<10)
	if r.Stdout != want {
		t.Errorf("the jail saw\n%s\nwant\n%s", r.Stdout, want)
	}
}

// pytestSummary is pytest's last line, "12 passed, 1 skipped, 2 xfailed in
// 3.4s", without the time.
var pytestSummary = regexp.MustCompile(`(?m)^=* ?((?:\d+ \w+(?:, )?)+) in [0-9.]+s`)

// summary is the counts of pytest's last line, warnings left out: they
// count DeprecationWarnings and the like, which depend on the environment,
// not on whether a test passed.
func summary(out string) string {
	m := pytestSummary.FindAllStringSubmatch(out, -1)
	if len(m) == 0 {
		return ""
	}
	var keep []string
	for _, part := range strings.Split(m[len(m)-1][1], ", ") {
		if !strings.Contains(part, "warning") {
			keep = append(keep, part)
		}
	}
	return strings.Join(keep, ", ")
}

// dataSuites are a few minutes' selection of the test suites Debian ships
// with numpy and pandas: array and ufunc basics, FFT, CSV and fixed-width
// parsing, sorting, rolling windows. None sizes itself by the
// machine's memory or CPUs (numpy's requires_memory tests would, and skip
// under a limit where the host runs them), so the counts must be equal.
var dataSuites = map[string][]string{
	"numpy": {
		"/usr/lib/python3/dist-packages/numpy/core/tests/test_numeric.py",
		"/usr/lib/python3/dist-packages/numpy/lib/tests/test_function_base.py",
		"/usr/lib/python3/dist-packages/numpy/fft",
	},
	"pandas": {
		"/usr/lib/python3/dist-packages/pandas/tests/frame/methods/test_sort_values.py",
		"/usr/lib/python3/dist-packages/pandas/tests/io/parser/test_read_fwf.py",
		"/usr/lib/python3/dist-packages/pandas/tests/io/formats/test_to_csv.py",
		"/usr/lib/python3/dist-packages/pandas/tests/window/test_rolling.py",
	},
}

// TestDataLibrarySuitesPassAsOutside runs each selection outside the jail,
// as an unprivileged user with the jail's environment, and inside the
// default jail: the same pytest counts, nothing refused, nothing from
// stockade on stderr.
func TestDataLibrarySuitesPassAsOutside(t *testing.T) {
	testenv.NeedJail(t)
	if testing.Short() {
		t.Skip("about a minute per library")
	}
	needModules(t, "pytest", "hypothesis")
	for lib, files := range dataSuites {
		t.Run(lib, func(t *testing.T) {
			needModules(t, lib)
			args := append([]string{"-m", "pytest", "-q", "-p", "no:cacheprovider"}, files...)
			outside := exec.Command("/usr/bin/python3", args...)
			outside.Dir = reachable(t)
			outside.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + outside.Dir, "LANG=C.UTF-8",
				"OPENBLAS_NUM_THREADS=1", "OMP_NUM_THREADS=1", "MPLBACKEND=Agg", "PYTHONDONTWRITEBYTECODE=1"}
			if os.Geteuid() == 0 {
				os.Chown(outside.Dir, 4242, 4242)
				outside.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 4242, Gid: 4242}}
			}
			out, err := outside.CombinedOutput()
			want := summary(string(out))
			if err != nil || want == "" {
				t.Fatalf("outside the jail: %v\n%s", err, tail(string(out), 3000))
			}
			code, jout, errs := invoke(t, "", append([]string{"run", "--json", "--timeout", "10m", "--memory", "2G",
				"--pids", "256", "--tmpfs-size", "512M", "--output-limit", "16M", "--", "python3"}, args...)...)
			var r jail.Result
			if err := json.Unmarshal([]byte(jout), &r); err != nil {
				t.Fatalf("exit %d: %v\n%s", code, err, errs)
			}
			got := summary(r.Stdout)
			t.Logf("outside: %s; inside: %s (%.0f ms)", want, got, r.WallMs)
			if got != want || r.Verdict != jail.VerdictOK {
				t.Errorf("inside the jail: %q (verdict %s), outside: %q\n%s\n%s", got, r.Verdict, want, tail(r.Stdout, 4000), tail(r.Stderr, 2000))
			}
			if len(r.BlockedSyscalls) != 0 {
				t.Errorf("refused calls: %+v", r.BlockedSyscalls)
			}
			if errs = ofThisRun(errs); errs != "" {
				t.Errorf("stockade said: %s", errs)
			}
		})
	}
}
