package jail

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/proctest"
	"github.com/stockade/stockade/internal/testenv"
)

func spec(args ...string) Spec { return testSpec(args...) }

func mustRun(t *testing.T, s Spec) *Result {
	t.Helper()
	res, err := runJail(t, s, Streams{})
	if err != nil {
		t.Fatalf("Run(%q): %v", s.Args, err)
	}
	return res
}

// jailDeadline is how long a test waits on a jail whose timeout is limit:
// twice that, and 30 s for set-up and teardown on a loaded machine.
func jailDeadline(limit time.Duration) time.Duration { return 2*limit + 30*time.Second }

// runJail is Run by the test's own deadline (jailDeadline): a jail still
// running then has outlived its timeout, and the test fails at once with
// what the jail had printed, instead of hanging the package until go
// test's global timeout.
func runJail(t *testing.T, s Spec, st Streams) (*Result, error) {
	t.Helper()
	var res *Result
	var err error
	d := jailDeadline(s.Timeout)
	if proctest.Within(t, d, func(ctx context.Context) { res, err = Run(ctx, s, st) }) {
		why := fmt.Sprint(err)
		if res.Error != nil {
			why = *res.Error
		}
		t.Fatalf("%.200q ran past its timeout of %v: the test's deadline of %v stopped it (verdict %s: %s); stdout so far %q, stderr so far %q",
			s.Args, s.Timeout, d, res.Verdict, why, tail(res.Stdout, 2000), tail(res.Stderr, 2000))
	}
	return res, err
}

// jailContext is a context for a jail run on a goroutine of the test,
// where runJail cannot fail the test: it ends at jailDeadline, and the
// run's verdict (cancelled) and error (the deadline) then say so.
func jailContext(t *testing.T, s Spec) (context.Context, context.CancelFunc) {
	d := proctest.Budget(t, jailDeadline(s.Timeout))
	return context.WithTimeoutCause(context.Background(), d, fmt.Errorf("%s: the test's deadline of %v passed", t.Name(), d))
}

func py(code string) Spec { return spec("python3", "-c", code) }

func TestDemoSum(t *testing.T) {
	testenv.NeedJail(t)
	r := mustRun(t, py("print(sum(range(100)))"))
	if r.Verdict != VerdictOK || r.ExitCode != 0 || r.Stdout != "4950\n" {
		t.Fatalf("got %+v", r)
	}
}

func TestDemoTimeout(t *testing.T) {
	testenv.NeedJail(t)
	s := py("while True: pass")
	s.Timeout = 2 * time.Second
	start := time.Now()
	r := mustRun(t, s)
	took := time.Since(start)
	if r.Verdict != VerdictTimeout || r.ExitCode != ExitTimeout {
		t.Fatalf("got %+v", r)
	}
	if took < 2*time.Second || took > 4*time.Second {
		t.Fatalf("timeout of 2s ended the run after %v", took)
	}
}

func TestEnvironmentIsEmpty(t *testing.T) {
	testenv.NeedJail(t)
	t.Setenv("API_KEY", "sk-123")
	r := mustRun(t, py(`import os; print(os.environ.get("API_KEY", "no key here")); print(sorted(os.environ))`))
	if !strings.HasPrefix(r.Stdout, "no key here\n") {
		t.Fatalf("the caller's environment leaked: %q", r.Stdout)
	}
	for _, k := range []string{"'HOME'", "'PATH'", "'LANG'", "'PYTHONDONTWRITEBYTECODE'", "'PYTHONUNBUFFERED'"} {
		if !strings.Contains(r.Stdout, k) {
			t.Errorf("environment lacks %s: %q", k, r.Stdout)
		}
	}
}

func TestEnvFlagAdds(t *testing.T) {
	testenv.NeedJail(t)
	s := py(`import os; print(os.environ["GREETING"])`)
	s.Env = []string{"GREETING=hello"}
	if r := mustRun(t, s); r.Stdout != "hello\n" {
		t.Fatalf("got %+v", r)
	}
}

func TestSecretsAreNotVisible(t *testing.T) {
	testenv.NeedJail(t)
	cwd, _ := os.Getwd()
	// /run and /sys hold only what stockade itself puts there: matplotlib's
	// font cache and the jail's own CPU list, nothing of the host's.
	code := fmt.Sprintf(`
import fnmatch, os
for p in ["/etc/shadow", "/root", "/home", %q, "/var/run/docker.sock", "/run/docker.sock"]:
    print(p, os.path.exists(p))
own = ["/run/stockade/matplotlib/fontlist-v*.json", "/sys/devices/system/cpu/online"]
for top in ["/run", "/sys"]:
    for d, dirs, files in os.walk(top):
        for f in files:
            p = os.path.join(d, f)
            print(p, not any(fnmatch.fnmatch(p, o) for o in own) and "True" or "False")
`, cwd)
	r := mustRun(t, py(code))
	for _, line := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		if !strings.HasSuffix(line, " False") {
			t.Errorf("visible in the jail: %s", line)
		}
	}
	if r.Verdict != VerdictOK {
		t.Fatalf("got %+v", r)
	}
}

func TestRootIsReadOnly(t *testing.T) {
	testenv.NeedJail(t)
	r := mustRun(t, py(`
import errno
for p in ["/x", "/usr/x", "/etc/x", "/etc/passwd", "/dev/x", "/bin/x", "/proc/sys/kernel/hostname"]:
    try:
        open(p, "w").write("x")
        print(p, "WRITABLE")
    except OSError as e:
        print(p, errno.errorcode[e.errno])
`))
	if strings.Contains(r.Stdout, "WRITABLE") || r.Verdict != VerdictOK {
		t.Fatalf("writes succeeded or run failed: %+v", r)
	}
}

func TestScratchSpaceIsWritableButNoexec(t *testing.T) {
	testenv.NeedJail(t)
	r := mustRun(t, spec("sh", "-c", `
cd /work && echo hi > f && cat f && cp /bin/true /work/t && chmod +x /work/t && (/work/t && echo EXEC-WORK || echo noexec-work)
echo x > /tmp/f && cp /bin/true /tmp/t && chmod +x /tmp/t && (/tmp/t && echo EXEC-TMP || echo noexec-tmp)`))
	want := "hi\nnoexec-work\nnoexec-tmp\n"
	if r.Stdout != want {
		t.Fatalf("stdout %q, want %q (stderr %q)", r.Stdout, want, r.Stderr)
	}
}

func TestIdentity(t *testing.T) {
	testenv.NeedJail(t)
	r := mustRun(t, spec("sh", "-c", `id -u; id -g; hostname; grep -E '^(CapEff|CapPrm|CapInh|CapBnd|CapAmb|NoNewPrivs):' /proc/self/status; cat /proc/self/uid_map`))
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if len(lines) < 9 {
		t.Fatalf("output %q", r.Stdout)
	}
	if lines[0] != "1000" || lines[1] != "1000" || lines[2] != "stockade" {
		t.Errorf("uid/gid/hostname = %q", lines[:3])
	}
	for _, l := range lines[3:8] {
		if !strings.HasSuffix(l, "0000000000000000") {
			t.Errorf("capabilities left: %s", l)
		}
	}
	if lines[8] != "NoNewPrivs:\t1" {
		t.Errorf("no_new_privs: %q", lines[8])
	}
	f := strings.Fields(lines[9])
	if len(f) != 3 || f[0] != "1000" || f[1] == "0" || f[2] != "1" {
		t.Errorf("uid_map %q must map only the jail user, never to host root", lines[9])
	}
}

func TestNoNetworkToHost(t *testing.T) {
	testenv.NeedJail(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
			accepted <- struct{}{}
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	r := mustRun(t, py(fmt.Sprintf(`
import socket, os
s = socket.socket()
s.settimeout(2)
try:
    s.connect(("127.0.0.1", %d)); print("CONNECTED")
except OSError as e:
    print("refused", e.errno)
print(sorted(os.listdir("/sys/class/net")) if os.path.exists("/sys/class/net") else open("/proc/net/dev").read().count(":"))
`, port)))
	if strings.Contains(r.Stdout, "CONNECTED") {
		t.Fatalf("the jail reached the host's listener: %q", r.Stdout)
	}
	select {
	case <-accepted:
		t.Fatal("the host listener accepted a connection from the jail")
	default:
	}
	if !strings.HasSuffix(r.Stdout, "\n1\n") {
		t.Errorf("want only lo: %q", r.Stdout)
	}
}

func TestNoHostAbstractSocket(t *testing.T) {
	testenv.NeedJail(t)
	name := fmt.Sprintf("@stockade-test-%d", os.Getpid())
	ln, err := net.Listen("unix", name)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	r := mustRun(t, py(fmt.Sprintf(`
import socket
s = socket.socket(socket.AF_UNIX)
try:
    s.connect("\0%s"); print("CONNECTED")
except OSError as e:
    print("refused", e.errno)
`, name[1:])))
	if !strings.HasPrefix(r.Stdout, "refused") {
		t.Fatalf("abstract socket of the host reachable: %q %q", r.Stdout, r.Stderr)
	}
}

func TestExitStatuses(t *testing.T) {
	testenv.NeedJail(t)
	cases := []struct {
		spec    Spec
		verdict Verdict
		code    int
	}{
		{py("import sys; sys.exit(3)"), VerdictExit, 3},
		{py("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"), VerdictSignal, 128 + 11},
		{spec("no-such-command"), VerdictError, ExitNotFound},
		{spec("/etc/passwd"), VerdictError, ExitCannotRun},
	}
	for _, c := range cases {
		res, _ := runJail(t, c.spec, Streams{})
		if res.Verdict != c.verdict || res.ExitCode != c.code {
			t.Errorf("%q: verdict %s exit %d, want %s %d (%v)", c.spec.Args, res.Verdict, res.ExitCode, c.verdict, c.code, res.Error)
		}
	}
}

// The policy kills a process that switches to a foreign ABI (x32 here):
// the one place a seccomp refusal is a death, reported as such.
func TestForeignABIIsASeccompKill(t *testing.T) {
	testenv.NeedJail(t)
	r := mustRun(t, py("import ctypes; ctypes.CDLL(None).syscall(0x40000000 | 39); print('survived')"))
	if r.Verdict != VerdictSeccomp || r.ExitCode != 128+31 || r.Stdout != "" {
		t.Fatalf("x32 getpid: %+v", r)
	}
}

func TestOutputIsCappedAndDrained(t *testing.T) {
	testenv.NeedJail(t)
	s := py(`import sys; sys.stdout.write("x" * 5_000_000); sys.stderr.write("e" * 10); print("done", file=sys.stderr)`)
	s.OutputLimit = 1000
	var streamed bytes.Buffer
	res, err := runJail(t, s, Streams{Stdout: &streamed})
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != VerdictOutput || len(res.Stdout) != 1000 || !res.StdoutTruncated || res.StdoutBytes != 5_000_000 {
		t.Fatalf("verdict %s, kept %d of %d, truncated %v", res.Verdict, len(res.Stdout), res.StdoutBytes, res.StdoutTruncated)
	}
	if streamed.Len() != 1000 {
		t.Fatalf("streamed %d bytes, want the capped 1000", streamed.Len())
	}
	if res.StderrTruncated || res.Stderr != "eeeeeeeeeedone\n" {
		t.Fatalf("stderr %q", res.Stderr)
	}
}

func TestStdinPassesThrough(t *testing.T) {
	testenv.NeedJail(t)
	f, err := os.CreateTemp(t.TempDir(), "in")
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("print(6*7)\n")
	f.Seek(0, 0)
	res, err := runJail(t, spec("python3", "-"), Streams{Stdin: f})
	if err != nil || res.Stdout != "42\n" {
		t.Fatalf("%+v %v", res, err)
	}
}

// markerProcs lists host processes whose command line carries marker.
func markerProcs(marker string) []string {
	var found []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(marker)) && !bytes.Contains(b, []byte("-test.")) {
			found = append(found, e.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return found
}

func TestDoubleForkedDaemonIsKilled(t *testing.T) {
	testenv.NeedJail(t)
	marker := fmt.Sprintf("stockade-daemon-%d", time.Now().UnixNano())
	// The daemon leaves its session, ignores SIGTERM and SIGHUP, and its
	// parent exits at once, so it is re-parented to init.
	r := mustRun(t, py(fmt.Sprintf(`
import os, signal, subprocess
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        os.execv("/usr/bin/python3", ["python3", "-c", "import time; time.sleep(1000)", %q])
    os._exit(0)
os.wait()
import time; time.sleep(0.3)
print("parent done")
`, marker)))
	if r.Stdout != "parent done\n" {
		t.Fatalf("got %+v", r)
	}
	if left := markerProcs(marker); len(left) > 0 {
		t.Fatalf("jailed processes survived the run: %v", left)
	}
}

func TestTimeoutKillsTreeIgnoringSIGTERM(t *testing.T) {
	testenv.NeedJail(t)
	marker := fmt.Sprintf("stockade-tree-%d", time.Now().UnixNano())
	s := spec("sh", "-c", fmt.Sprintf(`trap "" TERM HUP; for i in 1 2 3; do (trap "" TERM; exec python3 -c "import time; time.sleep(1000)" %s) & done; wait`, marker))
	s.Timeout = 500 * time.Millisecond
	r := mustRun(t, s)
	if r.Verdict != VerdictTimeout {
		t.Fatalf("got %+v", r)
	}
	if left := markerProcs(marker); len(left) > 0 {
		t.Fatalf("survivors: %v", left)
	}
}

// hostState is what a run must leave as it found it.
type hostState struct {
	mounts  int
	runDirs []string
}

func snapshot(t *testing.T) hostState {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(RunBase())
	var dirs []string
	for _, e := range ents {
		// Only this process's runs: other stockades may run beside it.
		if ranBy(e.Name(), os.Getpid()) {
			dirs = append(dirs, e.Name())
		}
	}
	return hostState{mounts: bytes.Count(b, []byte("\n")), runDirs: dirs}
}

func TestManyRunsLeaveNothingBehind(t *testing.T) {
	testenv.NeedJail(t)
	n := 200
	if testing.Short() {
		n = 20
	}
	if v, err := strconv.Atoi(os.Getenv("STOCKADE_SOAK")); err == nil && v > 0 {
		n = v // as TestSoak: fewer under emulation (vmtest)
	}
	before := snapshot(t)
	marker := fmt.Sprintf("stockade-many-%d", time.Now().UnixNano())
	for i := 0; i < n; i++ {
		s := spec("sh", "-c", fmt.Sprintf("echo %d > /work/f; (exec python3 -c 'import time; time.sleep(1000)' %s) & cat /work/f", i, marker))
		r := mustRun(t, s)
		if r.Stdout != fmt.Sprintf("%d\n", i) || r.Verdict != VerdictOK {
			t.Fatalf("run %d: %+v", i, r)
		}
	}
	after := snapshot(t)
	if after.mounts != before.mounts {
		t.Errorf("host mounts went from %d to %d", before.mounts, after.mounts)
	}
	if len(after.runDirs) != len(before.runDirs) {
		t.Errorf("run directories left: before %v, after %v", before.runDirs, after.runDirs)
	}
	if left := markerProcs(marker); len(left) > 0 {
		t.Errorf("processes left: %v", left)
	}
}

// reachableTempDir is a t.TempDir whose parent the jail user can traverse:
// a jail's init runs as the jail user and opens mount sources as it.
func reachableTempDir(t *testing.T) string {
	dir := t.TempDir()
	os.Chmod(filepath.Dir(dir), 0o755)
	os.Chmod(dir, 0o755)
	return dir
}

func TestWorkdirBindsUserDirectory(t *testing.T) {
	testenv.NeedJail(t)
	dir := reachableTempDir(t)
	os.WriteFile(filepath.Join(dir, "in.txt"), []byte("data\n"), 0o644)
	if os.Geteuid() == 0 {
		// The jail acts as the directory's owner; give it one.
		os.Chown(dir, 4242, 4242)
		os.Chown(filepath.Join(dir, "in.txt"), 4242, 4242)
	}
	s := spec("sh", "-c", "cat in.txt && echo out > out.txt")
	s.Workdir = dir
	r := mustRun(t, s)
	if r.Stdout != "data\n" || r.Verdict != VerdictOK {
		t.Fatalf("%+v", r)
	}
	b, err := os.ReadFile(filepath.Join(dir, "out.txt"))
	if err != nil || string(b) != "out\n" {
		t.Fatalf("file written in /work: %q %v", b, err)
	}
}

func TestWorkdirRefusals(t *testing.T) {
	testenv.NeedJail(t)
	home, _ := os.UserHomeDir()
	rootOwned := reachableTempDir(t)
	for _, dir := range []string{"/", home, "/home", rootOwned, "/run", "/run/user/4242", "/var/run/x"} {
		if dir == rootOwned && os.Geteuid() != 0 {
			continue
		}
		s := spec("true")
		s.Workdir = dir
		res, err := runJail(t, s, Streams{})
		if err == nil || res.ExitCode != ExitJailError || !strings.Contains(err.Error(), "workdir") {
			t.Errorf("--workdir %s: %v (exit %d), want a refusal", dir, err, res.ExitCode)
		}
	}
}

func TestReadOnlyBind(t *testing.T) {
	testenv.NeedJail(t)
	dir := reachableTempDir(t)
	os.WriteFile(filepath.Join(dir, "model.bin"), []byte("weights"), 0o644)
	s := spec("sh", "-c", "cat /models/model.bin; echo; echo x > /models/new 2>/dev/null && echo WRITABLE || echo ro")
	s.ReadOnly = []Bind{{Source: dir, Dest: "/models"}}
	if r := mustRun(t, s); r.Stdout != "weights\nro\n" {
		t.Fatalf("%+v", r)
	}
}

// A directory the jail wrote to on an earlier run may hold a planted
// symlink; binding through it must fail rather than expose its target.
func TestBindSourceSymlinkIsRefused(t *testing.T) {
	testenv.NeedJail(t)
	dir := reachableTempDir(t)
	if err := os.Symlink("/etc", filepath.Join(dir, "data")); err != nil {
		t.Fatal(err)
	}
	s := spec("ls", "/data")
	s.ReadOnly = []Bind{{Source: filepath.Join(dir, "data"), Dest: "/data"}}
	res, err := runJail(t, s, Streams{})
	if err == nil || !strings.Contains(err.Error(), "symlink") || res.ExitCode != ExitJailError {
		t.Fatalf("bind through a symlink: %v, exit %d, stdout %q", err, res.ExitCode, res.Stdout)
	}
}

// Every signal the payload may send init is dropped, the stop signals too
// (a stopped init would never reap the payload, and the run would hang).
func TestInitIsOutOfReach(t *testing.T) {
	testenv.NeedJail(t)
	r := mustRun(t, py(`
import os, signal
for p in ["/proc/1/exe", "/proc/1/mem", "/proc/1/environ", "/proc/1/root/"]:
    try:
        open(p, "rb").read(1); print(p, "OPEN")
    except OSError as e:
        print(p, "denied")
for s in (signal.SIGKILL, signal.SIGTERM, signal.SIGABRT, signal.SIGSEGV, signal.SIGTRAP,
          signal.SIGILL, signal.SIGSYS, signal.SIGBUS, signal.SIGFPE, signal.SIGQUIT,
          signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGPIPE,
          signal.SIGALRM, signal.SIGVTALRM, signal.SIGPROF, signal.SIGXCPU, signal.SIGXFSZ,
          signal.SIGPWR, signal.SIGIO, signal.SIGSTKFLT, signal.SIGSTOP, signal.SIGTSTP,
          signal.SIGTTIN, signal.SIGTTOU):
    os.kill(1, s)
import time; time.sleep(0.2)
print("alive")
`))
	if strings.Contains(r.Stdout, "OPEN") || !strings.HasSuffix(r.Stdout, "alive\n") || r.Verdict != VerdictOK {
		t.Fatalf("init reachable from the payload: %+v", r)
	}
}

// A tree deeper than the fd limit and PATH_MAX in /work must not outlive
// the run (os.RemoveAll gave up on it silently, for good).
func TestDeepWorkTreeIsRemoved(t *testing.T) {
	testenv.NeedJail(t)
	r := mustRun(t, py("import os\nfor _ in range(30000):\n    os.mkdir('d'); os.chdir('d')\nprint('deep')"))
	if r.Stdout != "deep\n" {
		t.Fatalf("%+v", r)
	}
	if left := snapshot(t).runDirs; len(left) > 0 {
		t.Fatalf("run directories left: %v", left)
	}
}

// Nothing the jail writes keeps a set-id bit on the host, where /work is.
func TestNoSetIDFilesOnTheHost(t *testing.T) {
	testenv.NeedJail(t)
	dir := reachableTempDir(t)
	if os.Geteuid() == 0 {
		os.Chown(dir, 4242, 0) // a root group must not be mapped either
	}
	s := py(`
import os, shutil
shutil.copy("/usr/bin/id", "id")
for m in (0o4755, 0o2755):
    try:
        os.chmod("id", m)
    except PermissionError:
        pass
try:
    os.close(os.open("x", os.O_CREAT | os.O_WRONLY, 0o6755))
except PermissionError:
    pass
print(open("/proc/self/gid_map").read().split())
`)
	s.Workdir = dir
	r := mustRun(t, s)
	if strings.Contains(r.Stdout, "'0',") {
		t.Errorf("host gid 0 is mapped: %s", r.Stdout)
	}
	for _, name := range []string{"id", "x"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err == nil && fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
			t.Errorf("%s has mode %v on the host", name, fi.Mode())
		}
	}
}

// inotify instances are charged up the user-namespace chain to host root
// (128 here): a jail must not be able to take them all.
func TestInotifyIsBoundedInTheJail(t *testing.T) {
	testenv.NeedJail(t)
	r := mustRun(t, py("import ctypes\nlibc = ctypes.CDLL(None)\nn = 0\nwhile n < 1000 and libc.inotify_init1(0) >= 0:\n    n += 1\nprint(n)"))
	if n, _ := strconv.Atoi(strings.TrimSpace(r.Stdout)); n == 0 || n > 16 {
		t.Fatalf("the jail opened %q inotify instances, want at most 16", r.Stdout)
	}
}

// The payload starts with every signal at its default disposition: init's
// own handling must not leak across execve (an ignored SIGINT would stop
// Python from ever raising KeyboardInterrupt).
func TestPayloadSignalsAreDefault(t *testing.T) {
	testenv.NeedJail(t)
	// Only what stockade's own caller already ignored may come along (an
	// ignored signal passes through every exec: make ignores 32 and 33, a
	// background busybox shell SIGQUIT); init must add nothing to it.
	// Go replaces an inherited SIG_IGN of SIGQUIT with its own handler in
	// this process but passes the original on to its children, so this
	// process cannot see that one; leave it out.
	own := sigMask(t, readStatus(t, "/proc/self/status"), "SigIgn") | 1<<(syscall.SIGQUIT-1)
	r := mustRun(t, spec("sh", "-c", "grep -E '^Sig(Ign|Blk):' /proc/self/status"))
	if ign := sigMask(t, r.Stdout, "SigIgn"); ign&^own != 0 {
		t.Errorf("payload starts with signals ignored that stockade's caller did not ignore: %#x (caller %#x)", ign, own)
	}
	if blk := sigMask(t, r.Stdout, "SigBlk"); blk != 0 {
		t.Errorf("payload starts with signals blocked: %#x", blk)
	}
	r = mustRun(t, py("import _thread\ntry:\n    _thread.interrupt_main()\n    import time; time.sleep(1)\nexcept KeyboardInterrupt:\n    print('interrupted')"))
	if r.Stdout != "interrupted\n" {
		t.Errorf("KeyboardInterrupt: %+v", r)
	}
}

func readStatus(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// sigMask reads one of the Sig* masks of a /proc/PID/status text.
func sigMask(t *testing.T, status, field string) uint64 {
	t.Helper()
	for _, l := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			m, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatalf("%s: %v", l, err)
			}
			return m
		}
	}
	t.Fatalf("no %s in %q", field, status)
	return 0
}

// A --workdir or --ro directory with a mount point below it cannot be
// given to the jail: the kernel refuses a user namespace an overlay of a
// tree whose submounts are locked to it (EINVAL). The refusal must name the
// mount point and the way out, not send the user after their kernel's
// version.
func TestBindWithAMountPointInsideNamesIt(t *testing.T) {
	testenv.NeedJail(t)
	testenv.NeedRoot(t, "mounts a tmpfs")
	dir := reachableTempDir(t)
	sub := filepath.Join(dir, "data", "cache")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, filepath.Join(dir, "data"), sub} {
		os.Chown(d, 4242, 4242)
	}
	if err := syscall.Mount("tmpfs", sub, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Unmount(sub, syscall.MNT_DETACH) })
	for _, flag := range []string{"--workdir", "--ro"} {
		s := spec("true")
		if flag == "--workdir" {
			s.Workdir = dir
		} else {
			s.ReadOnly = []Bind{{Source: dir, Dest: "/data"}}
		}
		res, err := runJail(t, s, Streams{})
		if err == nil || res.ExitCode != ExitJailError {
			t.Fatalf("%s %s: %v (exit %d), want a refusal", flag, dir, err, res.ExitCode)
		}
		msg := err.Error()
		if !strings.Contains(msg, flag+" "+dir) || !strings.Contains(msg, "mount point "+sub) || strings.Contains(msg, "Linux 5.11") {
			t.Errorf("%s %s: %q, want it to name the mount point %s and not the kernel's version", flag, dir, msg, sub)
		}
	}
}
