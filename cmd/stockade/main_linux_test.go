package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/clitest"
	"github.com/stockade/stockade/internal/proctest"
	"github.com/stockade/stockade/internal/testenv"
	"github.com/stockade/stockade/jail"
)

// TestMain makes the test binary double as the stockade CLI when a test
// starts it with STOCKADE_TEST_MAIN=1 (to SIGKILL it from outside). As a
// jail's init (jail.Run re-executes /proc/self/exe) package jail's init
// has taken it over before this runs.
func TestMain(m *testing.M) {
	if os.Getenv("STOCKADE_TEST_MAIN") == "1" {
		os.Exit(realMain(context.Background(), append([]string{"stockade"}, os.Args[1:]...), os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// invoke runs the CLI in-process and returns exit status, stdout, stderr.
// It waits no longer than clitest.Deadline: a run still going then has outlived
// its timeout, and the test fails with what it had printed.
func invoke(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	in, err := os.CreateTemp(t.TempDir(), "stdin")
	if err != nil {
		t.Fatal(err)
	}
	in.WriteString(stdin)
	in.Seek(0, 0)
	defer in.Close()
	var out, errb bytes.Buffer
	var code int
	d := clitest.Deadline(args)
	if proctest.Within(t, d, func(ctx context.Context) {
		code = realMain(ctx, append([]string{"stockade"}, args...), in, &out, &errb)
	}) {
		t.Fatalf("stockade %.200q outlived its timeout: the test's deadline of %v cancelled it (exit %d); stdout so far %q, stderr so far %q",
			args, d, code, tail(out.String(), 2000), tail(errb.String(), 2000))
	}
	return code, out.String(), errb.String()
}

// terminate ends a started cmd as a service manager would: SIGTERM, and
// SIGKILL if it has not exited within d. It says whether SIGTERM sufficed;
// either way cmd has been waited for.
func terminate(cmd *exec.Cmd, d time.Duration) bool {
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		cmd.Process.Kill()
		<-done
		return false
	}
}

func TestBadInvocationsExit125WithAReason(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"run"}, "no command given"},
		{[]string{"run", "--timeout", "soon", "--", "true"}, `--timeout: "soon" is not a duration`},
		{[]string{"run", "--tmpfs-size", "12 parsecs", "--", "true"}, `--tmpfs-size: "12 parsecs" is not a size`},
		{[]string{"run", "--ro", "relative:/x", "--", "true"}, "absolute"},
		{[]string{"run", "--ro", "/x:/proc/y", "--", "true"}, `--ro: destination "/proc/y" is inside /proc`},
		{[]string{"run", "--env", "NOEQUALS", "--", "true"}, `--env: "NOEQUALS" is not NAME=VALUE`},
		{[]string{"run", "--no-such-flag", "--", "true"}, "run: unknown flag --no-such-flag"},
		{[]string{"run", "--rootfs", "/nonexistent-root", "--", "true"}, "/nonexistent-root"},
		{[]string{"run", "--workdir", "/", "--", "true"}, `--workdir: "/" must be`},
		{[]string{"python"}, "give -c CODE"},
		{[]string{"run", "--cpus", "NaN", "--", "true"}, "--cpus: must be a finite number, not NaN"},
		{[]string{"run", "--pids", "1", "--", "true"}, "--pids: 1 is not in [16, "},
		{[]string{"run", "--memory", "1", "--", "true"}, "--memory: 1 is below the minimum of 4M (a missing unit?)"},
		{[]string{"run", "--timeout", "0", "--", "true"}, "--timeout: must be more than 0"},
		{[]string{"run", "--workdir", "/srv", "--no-workdir", "--", "true"}, "--workdir and --no-workdir: give one of them"},
		{[]string{"run", "--ro", "/usr/share:/work/x", "--", "true"}, `--ro: destination "/work/x" is inside /work`},
		{[]string{"run", "--ro", "/usr/share:/sys", "--", "true"}, `--ro: destination "/sys" is managed by stockade`},
	}
	for _, c := range cases {
		code, _, stderr := invoke(t, "", c.args...)
		if code != jail.ExitJailError || !strings.Contains(stderr, c.want) || strings.Contains(stderr, "panic") {
			t.Errorf("%q: exit %d, stderr %q; want 125 and %q", c.args, code, stderr, c.want)
		}
	}
}

// A FIFO given as a profile must be refused at once: opening it for
// reading would wait for a writer forever.
func TestProfileFIFOIsRefusedNotWaitedOn(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "p.toml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"run", "--profile", fifo, "--", "true"}, {"profile", "check", fifo}} {
		done := make(chan struct{})
		go func() {
			defer close(done)
			code, _, stderr := invoke(t, "", args...)
			if code != jail.ExitJailError || stderr != "stockade: profile "+fifo+": not a regular file\n" {
				t.Errorf("%q: exit %d, stderr %q", args, code, stderr)
			}
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%q: still waiting on the FIFO after 10s", args)
		}
	}
}

func TestRunStreamsAndExits(t *testing.T) {
	testenv.NeedJail(t)
	code, out, _ := invoke(t, "", "run", "--", "python3", "-c", "print(sum(range(100))); raise SystemExit(7)")
	if code != 7 || out != "4950\n" {
		t.Fatalf("exit %d stdout %q", code, out)
	}
}

func TestRunTimeoutSays124AndWhy(t *testing.T) {
	testenv.NeedJail(t)
	code, _, stderr := invoke(t, "", "run", "--timeout", "1s", "--", "python3", "-c", "while True: pass")
	if code != jail.ExitTimeout || !strings.Contains(stderr, "timeout: killed after 1s") {
		t.Fatalf("exit %d stderr %q", code, stderr)
	}
}

func TestJSONResult(t *testing.T) {
	testenv.NeedJail(t)
	code, out, _ := invoke(t, "", "run", "--json", "--memory", "256M", "--cpus", "0.5", "--", "python3", "-c", "print(1)")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, out)
	}
	for _, k := range []string{"verdict", "exit_code", "signal", "wall_ms", "user_ms", "sys_ms", "peak_memory_bytes",
		"stdout", "stderr", "stdout_truncated", "stderr_truncated", "error", "stockade_version", "blocked_syscalls", "cgroup"} {
		if _, ok := m[k]; !ok {
			t.Errorf("result lacks %q: %s", k, out)
		}
	}
	if m["verdict"] != "ok" || m["stdout"] != "1\n" {
		t.Errorf("result %s", out)
	}
	// The limits it ran under: the flags over the python profile.
	l, _ := m["limits"].(map[string]any)
	want := map[string]any{"timeout_ms": 10000.0, "memory_bytes": float64(256 << 20), "cpus": 0.5, "pids": 128.0,
		"swap_bytes": 0.0, "cpu_time_ms": nil, "open_files": 256.0, "file_size_bytes": float64(64 << 20),
		"output_bytes": float64(1 << 20), "tmpfs_bytes": float64(64 << 20), "work_bytes": float64(256 << 20)}
	for k, v := range want {
		if got, ok := l[k]; !ok || got != v {
			t.Errorf("limits.%s = %v, want %v", k, got, v)
		}
	}
}

// --work-size bounds a fresh /work; filling it is verdict disk, said on
// stderr with the size and the peak, and the JSON result has the peak.
func TestWorkSizeFlagAndDiskVerdict(t *testing.T) {
	testenv.NeedJail(t)
	fill := "import os\nfd = os.open('/work/f', os.O_WRONLY | os.O_CREAT)\ntry:\n    while True: os.write(fd, b'x' * 65536)\nexcept OSError as e: print(e.strerror)"
	code, out, stderr := invoke(t, "", "run", "--work-size", "4M", "--", "python3", "-c", fill)
	if code != 0 || out != "No space left on device\n" || !strings.Contains(stderr, "stockade: disk: /work filled its 4M") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	code, out, _ = invoke(t, "", "run", "--json", "--work-size", "4M", "--", "python3", "-c", fill)
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil || code != 0 {
		t.Fatalf("exit %d, %v: %s", code, err, out)
	}
	if m["verdict"] != "disk" || m["work_peak_bytes"].(float64) < 3<<20 || m["work_peak_bytes"].(float64) > 4<<20 {
		t.Errorf("result %s", out)
	}
	if code, _, stderr := invoke(t, "", "run", "--work-size", "0", "--", "true"); code != 125 || !strings.Contains(stderr, "--work-size") {
		t.Errorf("--work-size 0: exit %d, %q", code, stderr)
	}
}

func TestPythonShortcut(t *testing.T) {
	testenv.NeedJail(t)
	if code, out, _ := invoke(t, "print(6*7)\n", "python", "-"); code != 0 || out != "42\n" {
		t.Errorf("python -: %d %q", code, out)
	}
	if code, out, _ := invoke(t, "", "python", "-c", "import sys; print(sys.argv[1:])", "a", "b"); code != 0 || out != "['a', 'b']\n" {
		t.Errorf("python -c: %d %q", code, out)
	}
	dir := t.TempDir()
	os.Chmod(filepath.Dir(dir), 0o755)
	os.Chmod(dir, 0o755)
	prog := filepath.Join(dir, "task.py")
	os.WriteFile(prog, []byte("import os\nprint(__file__, os.getcwd())\n"), 0o644)
	if code, out, errs := invoke(t, "", "python", prog); code != 0 || out != "/run/stockade/task.py /work\n" {
		t.Errorf("python FILE: %d %q %q", code, out, errs)
	}
}

func TestSIGKILLOfStockadeKillsTheJail(t *testing.T) {
	testenv.NeedJail(t)
	privateLockDir(t)
	marker := fmt.Sprintf("stockade-sigkill-%d", time.Now().UnixNano())
	before := runEntries(t)
	cmd := exec.Command("/proc/self/exe", "run", "--timeout", "60s", "--", "python3", "-c",
		"import os, time\nif os.fork() == 0:\n    os.setsid()\ntime.sleep(1000)", marker)
	cmd.Env = append(os.Environ(), "STOCKADE_TEST_MAIN=1")
	p, err := proctest.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(procsWith(marker)) < 2 {
		if time.Now().After(deadline) {
			p.Kill()
			t.Fatalf("the jailed processes never appeared: stderr %q", p.Stderr())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	p.Wait(10 * time.Second)
	deadline = time.Now().Add(5 * time.Second)
	for {
		left := procsWith(marker)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("jailed processes outlived stockade: %v", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if left := leftoversOf(t, cmd.Process.Pid, before); len(left) == 0 {
		t.Error("the SIGKILLed stockade left nothing: then this test proves nothing about the sweep")
	}
	// The next run removes the run directory and cgroups the killed one left.
	if code, _, errs := invoke(t, "", "run", "--", "true"); code != 0 {
		t.Fatalf("next run: %d %s", code, errs)
	}
	if left := leftoversOf(t, cmd.Process.Pid, before); len(left) > 0 {
		t.Errorf("left behind by the killed stockade: %v", left)
	}
}

func procsWith(marker string) []string {
	var found []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(marker)) && !bytes.Contains(b, []byte("STOCKADE")) &&
			bytes.HasPrefix(b, []byte("python3")) {
			found = append(found, e.Name())
		}
	}
	return found
}

// The built binary (make build, STOCKADE_BIN) runs its embedded init from a
// sealed memfd: the jail's pid 1 is not the stockade file on the host, so
// nothing in the jail can reach that file through /proc/1/exe
// (CVE-2019-5736), and the memfd itself refuses writes.
func TestBuiltBinaryRunsSealedInit(t *testing.T) {
	testenv.NeedJail(t)
	bin := testenv.NeedBinary(t, "with the embedded init")
	cmd := exec.Command(bin, "run", "--timeout", "20s", "--", "python3", "-c", "import time; print('up', flush=True); time.sleep(20)")
	p, err := proctest.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	if !p.Await(30*time.Second, "up\n") {
		t.Fatalf("jail did not start: stdout %q, stderr %q", p.Stdout(), p.Stderr())
	}
	var initPid string
	for _, p := range proctest.Children(cmd.Process.Pid) {
		if stat, err := os.ReadFile(filepath.Join("/proc", p, "stat")); err == nil && bytes.Contains(stat, []byte("(jailinit)")) {
			initPid = p
		}
	}
	if initPid == "" {
		t.Fatal("no jailinit child of the stockade process")
	}
	exe, err := os.Readlink(filepath.Join("/proc", initPid, "exe"))
	if err != nil || !strings.HasPrefix(exe, "/memfd:jailinit") {
		t.Fatalf("init's exe is %q (%v), want the sealed memfd", exe, err)
	}
	f, err := os.OpenFile(filepath.Join("/proc", initPid, "exe"), os.O_WRONLY, 0)
	if err == nil {
		_, err = f.Write([]byte("x"))
		f.Close()
	}
	if err == nil {
		t.Fatal("the jail's init binary is writable")
	}
}

// The completion scripts complete commands and each command's flags, and
// stop completing after "--" (the payload's own arguments).
func TestCompletionScripts(t *testing.T) {
	code, script, errs := invoke(t, "", "completion", "bash")
	if code != 0 || !strings.Contains(script, "complete -F _stockade stockade") {
		t.Fatalf("bash: exit %d, %q", code, errs)
	}
	f := filepath.Join(t.TempDir(), "stockade.bash")
	os.WriteFile(f, []byte(script), 0o644)
	for words, want := range map[string]string{
		"stockade ru":                 "run",
		"stockade run --memo":         "--memory",
		"stockade selftest --no-cg":   "--no-cgroup",
		"stockade profile sh":         "show",
		"stockade run -- python3 --m": "",
	} {
		w := strings.Fields(words)
		if strings.HasSuffix(words, " ") {
			w = append(w, "")
		}
		out, err := exec.Command("bash", "-c", fmt.Sprintf(`source %s; COMP_WORDS=(%s); COMP_CWORD=%d; _stockade; echo "${COMPREPLY[*]}"`,
			f, strings.Join(w, " "), len(w)-1)).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != want {
			t.Errorf("%q completes to %q (%v), want %q", words, out, err, want)
		}
	}
	for shell, marker := range map[string]string{"zsh": "#compdef stockade", "fish": "complete -c stockade"} {
		code, out, errs := invoke(t, "", "completion", shell)
		if code != 0 || !strings.Contains(out, marker) {
			t.Errorf("%s: exit %d, %q, stderr %q", shell, code, out, errs)
		}
	}
	if code, _, errs := invoke(t, "", "completion", "tcsh"); code != jail.ExitJailError || !strings.Contains(errs, "bash, zsh or fish") {
		t.Errorf("tcsh: exit %d, %q", code, errs)
	}
}
