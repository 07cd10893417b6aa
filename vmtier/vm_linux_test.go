package vmtier

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/proctest"
	"github.com/stockade/stockade/internal/testenv"
	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/profiles"
	"golang.org/x/sys/unix"
)

// Every test here that boots a guest boots exactly one, under TCG on these
// machines (no KVM): seven in all (TestVMSelftest, in
// selftest_linux_test.go, the longest: the whole escape suite in one
// guest), each with its own deadlines (the tier's boot and answer
// allowances, and the context's).

// needVM skips t unless a guest can boot here: root, the stockade binary,
// QEMU and a guest kernel (STOCKADE_VM_KERNEL, or the one vmtest/run
// fetched into build/vm-cache).
func needVM(t *testing.T) Options {
	t.Helper()
	testenv.NeedRoot(t, "boots a VM whose VMM gets namespaces and a cgroup")
	bin := testenv.NeedBinary(t, "the guest's init is the stockade binary")
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("no qemu-system-x86_64 (apt-get install qemu-system-x86)")
	}
	repo, _ := filepath.Abs("..")
	kernel := os.Getenv(KernelEnv)
	if kernel == "" {
		found, _ := filepath.Glob(filepath.Join(repo, "build/vm-cache/kernel/*/vmlinuz"))
		if len(found) == 0 {
			t.Skip("no guest kernel: set " + KernelEnv + " or run vmtest/run --fetch-kernel")
		}
		kernel = found[len(found)-1]
	}
	cache := os.Getenv(CacheEnv)
	if cache == "" {
		cache = filepath.Join(repo, "build/vm-tier")
	}
	return Options{Binary: bin, Kernel: kernel, Cache: cache}
}

// vmSpec is the python profile's Spec for args, in the VM tier, with
// emulation allowed where there is no KVM.
func vmSpec(t *testing.T, args ...string) jail.Spec {
	t.Helper()
	p := profiles.Defaults().Clone()
	p.Isolation = profiles.IsolationVM
	spec := p.Spec(args, jail.Host{})
	spec.VMEmulate = KVM() != nil
	return spec
}

// leftovers is what a run could leave on the host: its run directory (the
// channel's socket), its cgroup, a process whose command line names the
// run directory (the VMM).
type leftovers struct{ dir, cgroup string }

func watch(o *Options) *leftovers {
	l := &leftovers{}
	o.runDir = func(d string) { l.dir = d }
	o.cgroupID = func(c string) { l.cgroup = c }
	return l
}

func (l *leftovers) check(t *testing.T) {
	t.Helper()
	if l.dir == "" || l.cgroup == "" {
		t.Fatalf("the run never reported its run directory (%q) or cgroup (%q)", l.dir, l.cgroup)
	}
	if _, err := os.Lstat(l.dir); !os.IsNotExist(err) {
		t.Errorf("run directory %s left behind (%v)", l.dir, err)
	}
	out, _ := exec.Command("find", "/sys/fs/cgroup", "-maxdepth", "8", "-type", "d", "-name", l.cgroup).Output()
	if s := strings.TrimSpace(string(out)); s != "" {
		t.Errorf("cgroup left behind: %s", s)
	}
	// The VMM's root and its binds lived in its own mount namespace.
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mi), l.dir) {
		t.Errorf("mount left behind under %s", l.dir)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		if strings.Contains(string(b), l.dir) {
			t.Errorf("process left behind: %s: %q", p, strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
}

func runVM(t *testing.T, spec jail.Spec, o Options) (*jail.Result, error) {
	t.Helper()
	var res *jail.Result
	var err error
	proctest.Within(t, 6*time.Minute, func(ctx context.Context) {
		res, err = Run(ctx, spec, jail.Streams{}, o)
	})
	if res == nil {
		t.Fatal("no result")
	}
	return res, err
}

// The seed cases and files in and out, in one guest: 1+2 prints 3, a file
// of the host's is out of reach, /work holds the --workdir's file and what
// the guest writes there comes back; the result has the jail's shape.
func TestVMSeedCasesAndFiles(t *testing.T) {
	o := needVM(t)
	left := watch(&o)
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("s3cret-of-the-host"), 0o644); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "in.txt"), []byte("hello from the host"), 0o644); err != nil {
		t.Fatal(err)
	}
	code := `
import os
print(1 + 2)
try:
    print("secret:", open(` + "'" + secret + "'" + `).read())
except OSError as e:
    print("secret refused:", type(e).__name__)
data = open("/work/in.txt").read()
os.makedirs("/work/out", exist_ok=True)
open("/work/out/up.txt", "w").write(data.upper())
print("kernel:", os.uname().release)
import glob
cache = glob.glob(os.path.join(os.environ.get("MPLCONFIGDIR", "/nonexistent"), "fontlist-v*.json"))
print("font cache:", "prepared" if cache and os.path.islink(cache[0]) else "none")
` + plotCode
	spec := vmSpec(t, "python3", "-c", code)
	spec.Workdir = work
	// matplotlib's first import in a guest builds its font cache, under
	// emulation at this machine's load for more than the profile's 30 s.
	spec.Timeout = 4 * time.Minute
	res, err := runVM(t, spec, o)
	if err != nil || res.Verdict != jail.VerdictOK {
		t.Fatalf("verdict %s, err %v, stderr %q", res.Verdict, err, res.Stderr)
	}
	if !strings.HasPrefix(res.Stdout, "3\n") {
		t.Errorf("stdout %q: want 3 first", res.Stdout)
	}
	if strings.Contains(res.Stdout, "s3cret") || !strings.Contains(res.Stdout, "secret refused:") {
		t.Errorf("the host's secret: stdout %q", res.Stdout)
	}
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	t.Logf("guest says %q; host kernel %s", res.Stdout, unix.ByteSliceToString(uts.Release[:]))
	got, err := os.ReadFile(filepath.Join(work, "out/up.txt"))
	if err != nil || string(got) != "HELLO FROM THE HOST" {
		t.Errorf("the guest's /work/out/up.txt on the host: %q, %v", got, err)
	}
	if dataStack(t) {
		// The image's font cache, bound by the guest's FontCache provider:
		// the plot does not build one.
		if !strings.Contains(res.Stdout, "font cache: prepared\n") {
			t.Errorf("stdout %q: want the image's font cache in MPLCONFIGDIR", res.Stdout)
		}
		png, err := os.ReadFile(filepath.Join(work, "out/plot.png"))
		if err != nil || !strings.HasPrefix(string(png), "\x89PNG\r\n") {
			t.Errorf("the guest's figure on the host: %d bytes, %v; stdout %q stderr %q", len(png), err, res.Stdout, res.Stderr)
		}
	}
	left.check(t)

	// The same run in the jail tier: the same JSON keys, the same figure.
	// A --workdir there too (the result then has copy_back_ms as the
	// VM's has): an ordinary user's, on a path the jail user can search.
	jwork, err := os.MkdirTemp("", "stockade-vmtier-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(jwork) })
	if err := os.Chmod(jwork, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(jwork, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	jr := proctest.Run(t, exec.Command(o.Binary, "run", "--json", "--workdir", jwork, "--", "python3", "-c", "import os\nos.makedirs('/work/out')\n"+plotCode), 2*time.Minute)
	if jr.Code() != 0 {
		t.Fatalf("the jail run: %d %s %s %s", jr.Code(), jr.Stdout, jr.Stderr, jr.Overstayed())
	}
	if j, v := keys(t, []byte(jr.Stdout)), keys(t, mustJSON(t, res)); !slices.Equal(j, v) {
		t.Errorf("the result's keys differ:\njail %v\nvm   %v", j, v)
	}
	if png, err := os.ReadFile(filepath.Join(jwork, "out/plot.png")); dataStack(t) && (err != nil || !strings.HasPrefix(string(png), "\x89PNG\r\n")) {
		t.Errorf("the jail tier's figure: %d bytes, %v", len(png), err)
	}
}

// plotCode draws a figure into /work/out/plot.png, as a payload plots in
// the jail tier, or says that the data stack is missing.
const plotCode = `
import time
t0 = time.monotonic()
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError as e:
    print("no data stack:", e)
else:
    plt.plot([1, 4, 9])
    plt.savefig("/work/out/plot.png")
    print("plot saved in %.1f s" % (time.monotonic() - t0))
`

// dataStack reports whether the host's Python has matplotlib: the guest's
// image carries it then, and a plot must come back from both tiers.
func dataStack(t *testing.T) bool {
	t.Helper()
	return exec.Command(hostPython, "-c", "import matplotlib, numpy").Run() == nil
}

func mustJSON(t *testing.T, r *jail.Result) []byte {
	var b strings.Builder
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	return []byte(b.String())
}

func keys(t *testing.T, b []byte) []string {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// An endless loop ends at the timeout, as the guest's jail says.
func TestVMTimeout(t *testing.T) {
	o := needVM(t)
	spec := vmSpec(t, "python3", "-c", "while True: pass")
	spec.Timeout = 2 * time.Second
	res, err := runVM(t, spec, o)
	if err != nil || res.Verdict != jail.VerdictTimeout || res.ExitCode != jail.ExitTimeout {
		t.Fatalf("verdict %s exit %d, err %v", res.Verdict, res.ExitCode, err)
	}
}

// The memory and pids limits hold in the guest, in one boot: a fork bomb
// is held by the guest's jail's pids limit (it forks fewer children than
// the limit, and the result counts the tasks), then the payload grows
// until the guest's jail's memory limit kills it. The verdict is the one
// the jail tier gives the same payload on the host (memory outranks pids).
func TestVMMemoryAndPids(t *testing.T) {
	o := needVM(t)
	const code = `
import os, signal, sys, time
n, kids = 0, []
try:
    while n < 4096:
        pid = os.fork()
        if pid == 0:
            time.sleep(60); os._exit(0)
        kids.append(pid); n += 1
except OSError as e:
    print("held after", n, type(e).__name__)
for k in kids:
    os.kill(k, signal.SIGKILL)
    os.waitpid(k, 0)
sys.stdout.flush()
b = []
while True: b.append(bytearray(16 << 20))
`
	spec := vmSpec(t, "python3", "-c", code)
	spec.Cgroup.MemoryMax = 96 << 20
	spec.Cgroup.PidsMax = 32
	res, err := runVM(t, spec, o)
	if err != nil || res.Verdict != jail.VerdictMemory {
		t.Fatalf("verdict %s exit %d, err %v, stdout %q stderr %q", res.Verdict, res.ExitCode, err, res.Stdout, res.Stderr)
	}
	if res.PeakMemoryBytes == 0 || res.PeakMemoryBytes > 100<<20 {
		t.Errorf("peak %d: want up to the 96 MiB limit", res.PeakMemoryBytes)
	}
	var held int
	if _, err := fmt.Sscanf(res.Stdout, "held after %d BlockingIOError", &held); err != nil || held >= 32 {
		t.Errorf("stdout %q: want the fork bomb held below the limit of 32 tasks", res.Stdout)
	}
	if res.PidsPeak == 0 || res.PidsPeak > 32 {
		t.Errorf("pids_peak %d: want up to the limit of 32", res.PidsPeak)
	}

	// The jail tier, on the host, gives the same payload the same verdict.
	jr := proctest.Run(t, exec.Command(o.Binary, "run", "--json", "--memory", "96M", "--pids", "32", "--", "python3", "-c", code), 2*time.Minute)
	var j jail.Result
	if err := json.Unmarshal([]byte(jr.Stdout), &j); err != nil {
		t.Fatalf("the jail run: %v: %s %s %s", err, jr.Stdout, jr.Stderr, jr.Overstayed())
	}
	if j.Verdict != res.Verdict || j.ExitCode != res.ExitCode || !strings.HasPrefix(j.Stdout, "held after") {
		t.Errorf("jail: verdict %s exit %d stdout %q; vm: verdict %s exit %d", j.Verdict, j.ExitCode, j.Stdout, res.Verdict, res.ExitCode)
	}
}

// A VMM killed mid-run: its own verdict, and nothing of it left.
func TestVMKilledVMM(t *testing.T) {
	o := needVM(t)
	left := watch(&o)
	confined := make(chan []string, 1)
	o.onHello = func(pid int) {
		// While it runs: the VMM is in namespaces of its own (no
		// network) and in the run's cgroup.
		var wrong []string
		for _, ns := range []string{"net", "pid", "mnt", "ipc", "uts"} {
			mine, _ := os.Readlink("/proc/self/ns/" + ns)
			its, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, ns))
			if err != nil || its == mine {
				wrong = append(wrong, fmt.Sprintf("%s namespace: the host's (%s, %v)", ns, its, err))
			}
		}
		// QEMU's own seccomp sandbox is on (mode 2, a filter), in
		// every thread: -sandbox loads it before the vCPUs start.
		status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if !strings.Contains(string(status), "\nSeccomp:\t2\n") {
			wrong = append(wrong, "no seccomp filter (QEMU's -sandbox)")
		}
		cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if left.cgroup == "" || !strings.Contains(string(cg), "/"+left.cgroup+"\n") {
			wrong = append(wrong, fmt.Sprintf("not in its cgroup %q: %s", left.cgroup, cg))
		}
		confined <- wrong
		go func() {
			time.Sleep(time.Second)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}()
	}
	spec := vmSpec(t, "python3", "-c", "import time; time.sleep(60)")
	spec.Timeout = 60 * time.Second
	res, err := runVM(t, spec, o)
	if err == nil || res.Verdict != VerdictDied || res.ExitCode != jail.ExitJailError {
		t.Fatalf("verdict %s exit %d, err %v", res.Verdict, res.ExitCode, err)
	}
	if !strings.Contains(err.Error(), "SIGKILL") {
		t.Errorf("error %q: want the signal named", err)
	}
	select {
	case wrong := <-confined:
		for _, w := range wrong {
			t.Errorf("the VMM: %s", w)
		}
	default:
		t.Error("the guest never said hello")
	}
	left.check(t)
}

// A guest that takes the plan and never answers: the host's deadline
// (timeout plus the answer allowance) ends it.
func TestVMNeverAnswers(t *testing.T) {
	o := needVM(t)
	left := watch(&o)
	o.fault = "silent"
	o.AnswerAllowance = 5 * time.Second
	spec := vmSpec(t, "python3", "-c", "pass")
	spec.Timeout = time.Second
	res, err := runVM(t, spec, o)
	if err == nil || res.Verdict != VerdictNoAnswer {
		t.Fatalf("verdict %s, err %v", res.Verdict, err)
	}
	left.check(t)
}

// A guest kernel that panics (its init exits): vm_panic, not ok.
func TestVMGuestPanics(t *testing.T) {
	o := needVM(t)
	left := watch(&o)
	o.fault = "panic"
	res, err := runVM(t, vmSpec(t, "python3", "-c", "pass"), o)
	if err == nil || res.Verdict != VerdictPanic || res.ExitCode != jail.ExitJailError {
		t.Fatalf("verdict %s exit %d, err %v", res.Verdict, res.ExitCode, err)
	}
	left.check(t)
}

// fakeVMM is a stand-in for QEMU that boots nothing: the host side's
// bounds are tested without a guest.
func fakeVMM(t *testing.T, script string) Options {
	o := needVM(t)
	f := filepath.Join(t.TempDir(), "qemu")
	if err := os.WriteFile(f, []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	o.QEMU = f
	// The VMM's jail exposes the script's shell and the tools it runs
	// (by path: its environment is empty).
	o.vmmTools = []string{"/usr/bin/yes", "/usr/bin/sleep"}
	return o
}

// A console that floods is cut at its bound and the VMM killed.
func TestVMConsoleFlood(t *testing.T) {
	o := fakeVMM(t, "exec /usr/bin/yes 'the guest floods its console'")
	left := watch(&o)
	// Shorter than the flood takes to fill the console's bound by far
	// at any load: without the bound this ends as vm_no_answer.
	o.BootAllowance = 20 * time.Second
	res, err := runVM(t, vmSpec(t, "true"), o)
	if err == nil || res.Verdict != VerdictConsole {
		t.Fatalf("verdict %s, err %v", res.Verdict, err)
	}
	left.check(t)
}

// A guest that never comes up: the boot allowance ends it.
func TestVMNeverBoots(t *testing.T) {
	o := fakeVMM(t, "exec /usr/bin/sleep 600")
	left := watch(&o)
	o.BootAllowance = 2 * time.Second
	res, err := runVM(t, vmSpec(t, "true"), o)
	if err == nil || res.Verdict != VerdictNoAnswer {
		t.Fatalf("verdict %s, err %v", res.Verdict, err)
	}
	left.check(t)
}

// Without /dev/kvm and without the opt-in the tier refuses, exit 125,
// saying why and what to do.
func TestVMRefusesWithoutKVM(t *testing.T) {
	if KVM() == nil {
		t.Skip("this host has KVM")
	}
	spec := vmSpec(t, "true")
	spec.VMEmulate = false
	t.Setenv(EmulateEnv, "")
	res, err := Run(context.Background(), spec, jail.Streams{}, Options{})
	if err == nil || res.ExitCode != jail.ExitJailError || res.Verdict != jail.VerdictError {
		t.Fatalf("verdict %s exit %d, err %v", res.Verdict, res.ExitCode, err)
	}
	for _, want := range []string{"/dev/kvm", "--vm-emulate"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// A stockade SIGKILLed mid-run: its VMM dies with it (parent-death
// signal), and the VMM's cgroup, recorded in the run's lock slot, goes at
// the next run's sweep. The guest need not have booted: the VMM is killed
// as soon as it is seen.
func TestVMStockadeKilled(t *testing.T) {
	o := needVM(t)
	locks := t.TempDir()
	env := append(os.Environ(), KernelEnv+"="+o.Kernel, CacheEnv+"="+o.Cache, EmulateEnv+"=1", "STOCKADE_LOCK_DIR="+locks)
	cmd := exec.Command(o.Binary, "run", "--isolation", "vm", "--", "python3", "-c", "import time; time.sleep(60)")
	cmd.Env = env
	p, err := proctest.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	stockade := cmd.Process.Pid
	// The VMM: the child of stockade's that runs QEMU.
	vmm, group := 0, ""
	for deadline := time.Now().Add(2 * time.Minute); vmm == 0 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		procs, _ := filepath.Glob("/proc/[0-9]*/stat")
		for _, f := range procs {
			b, _ := os.ReadFile(f)
			// pid (comm) state ppid ...
			_, rest, ok := strings.Cut(string(b), ") ")
			fields := strings.Fields(rest)
			if !ok || len(fields) < 2 || fields[1] != fmt.Sprint(stockade) || !strings.Contains(string(b), "(qemu-system-x86") {
				continue
			}
			fmt.Sscan(strings.TrimPrefix(filepath.Dir(f), "/proc/"), &vmm)
			cg, _ := os.ReadFile(filepath.Join(filepath.Dir(f), "cgroup"))
			for _, l := range strings.Split(string(cg), "\n") {
				if i := strings.Index(l, "/stockade.vm-"); i >= 0 {
					group = filepath.Base(l[i:])
				}
			}
		}
	}
	if vmm == 0 || group == "" {
		p.Kill()
		t.Fatalf("no VMM (pid %d) in a cgroup of its own (%q) seen under stockade %d", vmm, group, stockade)
	}
	if err := syscall.Kill(stockade, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.Wait(30 * time.Second)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if err := syscall.Kill(vmm, 0); err == syscall.ESRCH {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the VMM %d outlived its stockade", vmm)
		}
	}
	// The next run sweeps what the dead one recorded.
	next := exec.Command(o.Binary, "run", "--", "true")
	next.Env = env
	if out := proctest.Run(t, next, 2*time.Minute); out.Code() != 0 {
		t.Fatalf("the next run: %d %s %s", out.Code(), out.Stderr, out.Overstayed())
	}
	left := &leftovers{dir: "/nonexistent-" + group, cgroup: group}
	left.check(t)
}
