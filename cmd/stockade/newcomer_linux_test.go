package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stockade/stockade/internal/clitest"
	"github.com/stockade/stockade/internal/testenv"
)

// envCgroupParent is the variable a normal user sets once instead of
// typing --cgroup-parent.
const envCgroupParent = "STOCKADE_CGROUP_PARENT"

// What a newcomer met in the first hour (issue 31): each refusal or
// failure must say what stockade does instead, and the command it names
// must work when typed.

// `import polars` where polars is in the user's venv: the jail's Python is
// the host's /usr/bin/python3 with Debian's packages, which nothing said.
func TestMissingModuleSaysWhichPythonAndHowToAddOne(t *testing.T) {
	testenv.NeedJail(t)
	const mod = "stockade_no_such_module"
	code, _, errs := invoke(t, "", "run", "--", "python3", "-c", "import "+mod)
	for _, want := range []string{
		"ModuleNotFoundError: No module named '" + mod + "'",
		"stockade: no module " + mod + " in the jail: its Python is the host's /usr/bin/python3 with the packages Debian installed",
		"apt-get install python3-stockade-no-such-module",
		"stockade rootfs build --pip " + mod + " DIR",
		"docs/jail.md",
	} {
		if code != 1 || !strings.Contains(errs, want) {
			t.Errorf("import %s: exit %d, stderr lacks %q:\n%s", mod, code, want, errs)
		}
	}
	// The user's own module, beside them: the bind the hint names works.
	dir := reachable(t)
	if err := os.WriteFile(filepath.Join(dir, "stockade_helper.py"), []byte("V = 5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	code, _, errs = invoke(t, "", "run", "--", "python3", "-c", "import stockade_helper")
	want := "stockade: stockade_helper.py is in your current directory, not in the jail: bind the directory with --ro " + dir + ":/src and add --env PYTHONPATH=/src"
	if code != 1 || !strings.Contains(errs, want) || strings.Contains(errs, "apt-get") {
		t.Errorf("import stockade_helper from its directory: exit %d, stderr %q\nwant %q", code, errs, want)
	}
	code, out, errs := invoke(t, "", "run", "--ro", dir+":/src", "--env", "PYTHONPATH=/src", "--", "python3", "-c", "import stockade_helper; print(stockade_helper.V)")
	if code != 0 || out != "5\n" {
		t.Errorf("the hint's bind: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	// A package that is there, missing a submodule: the root is not why.
	code, _, errs = invoke(t, "", "run", "--", "python3", "-c", "import json.stockade_nosuch")
	if code != 1 || !strings.Contains(errs, "No module named 'json.stockade_nosuch'") || strings.Contains(errs, "stockade: no module") {
		t.Errorf("import json.stockade_nosuch: exit %d, stderr %q", code, errs)
	}
}

// open("data/x.csv") from the directory holding data/: the jail's cwd is
// its empty /work. The hint's --ro must be the one that makes it work.
func TestRelativeFileInCallersDirectoryGetsABindThatWorks(t *testing.T) {
	testenv.NeedJail(t)
	dir := reachable(t)
	if err := os.Mkdir(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data", "x.csv"), []byte("a,b\n1,2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	code, _, errs := invoke(t, "", "run", "--", "python3", "-c", `print(open("data/x.csv").read())`)
	want := "stockade: data/x.csv is in your current directory, not in the jail (its cwd is /work, which starts empty): bind it with --ro " +
		filepath.Join(dir, "data") + ":/data and open /data/x.csv"
	if code != 1 || !strings.Contains(errs, "FileNotFoundError") || !strings.Contains(errs, want) {
		t.Fatalf("open data/x.csv: exit %d, stderr %q\nwant %q", code, errs, want)
	}
	code, out, errs := invoke(t, "", "run", "--ro", filepath.Join(dir, "data")+":/data", "--", "python3", "-c", `print(open("/data/x.csv").read())`)
	if code != 0 || out != "a,b\n1,2\n\n" {
		t.Errorf("the hint's bind: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	// A directory whose name the root has (etc/): bound below /mnt, where
	// it neither hides the jail's /etc nor is refused.
	if err := os.Mkdir(filepath.Join(dir, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "etc", "a.conf"), []byte("k=v\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errs = invoke(t, "", "run", "--", "python3", "-c", `open("etc/a.conf")`)
	if want := "bind it with --ro " + filepath.Join(dir, "etc") + ":/mnt/etc and open /mnt/etc/a.conf"; code != 1 || !strings.Contains(errs, want) {
		t.Errorf("open etc/a.conf: exit %d, stderr %q\nwant %q", code, errs, want)
	}
	code, out, errs = invoke(t, "", "run", "--ro", filepath.Join(dir, "etc")+":/mnt/etc", "--", "python3", "-c", `print(open("/mnt/etc/a.conf").read(), end="")`)
	if code != 0 || out != "k=v\n" {
		t.Errorf("the hint's bind below /mnt: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	// A file that is not here either: no hint.
	code, _, errs = invoke(t, "", "run", "--", "python3", "-c", `open("data/nosuch.csv")`)
	if code != 1 || strings.Contains(errs, "current directory") {
		t.Errorf("open data/nosuch.csv: exit %d, stderr %q", code, errs)
	}
}

// --ro $PWD/data:/work/data is refused (stockade mounts /work itself); the
// refusal must name the flag as typed and an alternative that works.
func TestRoIntoWorkNamesTheFlagAndAnAlternative(t *testing.T) {
	testenv.NeedJail(t)
	dir := t.TempDir()
	code, out, errs := invoke(t, "", "run", "--ro", dir+":/work/data", "--", "true")
	for _, want := range []string{
		`stockade: --ro: destination "/work/data" is inside /work`,
		"stockade: --ro " + dir + ":/work/data: bind it outside /work instead (as --ro " + dir + ":/data, and open /data/...), or make a directory the jail's /work with --workdir DIR",
	} {
		if code != 125 || out != "" || !strings.Contains(errs, want) {
			t.Errorf("--ro into /work: exit %d, stdout %q, stderr lacks %q:\n%s", code, out, want, errs)
		}
	}
	if strings.Contains(errs, "filesystem.ro") {
		t.Errorf("the refusal names the profile field, not the flag: %s", errs)
	}
}

// A --workdir owned by root, then by nobody, took two round trips: the
// refusal must name the uid the jail accepts and the command, and that
// command must be enough.
func TestWorkdirOwnerRefusalGivesACommandThatWorks(t *testing.T) {
	testenv.NeedJail(t)
	if os.Getuid() != 0 {
		t.Skip("the owner check is root's: a normal user's jail acts as that user")
	}
	t.Setenv("SUDO_UID", "")
	dir := filepath.Join(reachable(t), "out")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	uid := "1000" // Debian's login.defs UID_MIN
	want := "stockade: the jail writes as the directory's owner, which must be an ordinary user (a uid of " + uid + " or above, not nobody): chown -R " +
		uid + ":" + uid + " " + dir
	for _, owner := range []int{0, 65534} {
		if err := os.Chown(dir, owner, owner); err != nil {
			t.Fatal(err)
		}
		code, _, errs := invoke(t, "", "run", "--workdir", dir, "--", "touch", "made")
		if code != 125 || !strings.Contains(errs, want) {
			t.Errorf("--workdir owned by %d: exit %d, stderr %q\nwant %q", owner, code, errs, want)
		}
	}
	if out, err := exec.Command("chown", "-R", uid+":"+uid, dir).CombinedOutput(); err != nil {
		t.Fatalf("the hint's command: %v: %s", err, out)
	}
	code, _, errs := invoke(t, "", "run", "--workdir", dir, "--", "touch", "made")
	if _, err := os.Stat(filepath.Join(dir, "made")); code != 0 || err != nil {
		t.Errorf("after the hint's chown: exit %d (%v), stderr %q", code, err, errs)
	}
}

// `stockade python nosuch.py` answered "bind: --ro ...: no such file",
// naming a flag the user never typed.
func TestPythonMissingScriptSaysTheScriptIsNotThere(t *testing.T) {
	t.Chdir(t.TempDir())
	code, out, errs := runCLI(t, "python", "nosuch.py")
	want := "stockade: python: nosuch.py: no such script (give a FILE that exists, -c CODE, or - for stdin)\n"
	if code != 125 || out != "" || errs != want {
		t.Errorf("python nosuch.py: exit %d, stdout %q, stderr %q; want %q", code, out, errs, want)
	}
}

// A normal user typed --cgroup-parent on every command: the environment
// gives it once. The parent here is a fresh v1 group; its memory peak is 0
// until a run below it uses memory, which shows where the run went. A
// flag beats the variable, and --no-cgroup ignores it.
func TestCgroupParentFromTheEnvironment(t *testing.T) {
	testenv.NeedJail(t)
	rel := filepath.Join(clitest.OwnV1MemoryCgroup(t, "needs a cgroup v1 memory hierarchy (the VM covers v2)"),
		"stockadetest-env-"+strconv.Itoa(os.Getpid()))
	dirs := clitest.MakeV1Cgroups(t, rel, []string{"memory", "cpu", "cpuacct", "pids", "freezer"}, nil)
	peak := func() int64 {
		b, err := os.ReadFile(filepath.Join(dirs[0], "memory.max_usage_in_bytes"))
		if err != nil {
			t.Fatal(err)
		}
		v, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return v
	}
	if !strings.Contains(dirs[0], "/memory/") || peak() != 0 {
		t.Fatalf("the fresh parent %v: peak %d", dirs, peak())
	}
	t.Setenv(envCgroupParent, rel)
	code, out, errs := invoke(t, "", "run", "--json", "--", "python3", "-c", "b = bytearray(8 << 20)")
	var r struct{ Verdict, Cgroup string }
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 || r.Verdict != "ok" || r.Cgroup != "v1" {
		t.Fatalf("run with $%s: exit %d, %+v (%v), stderr %q", envCgroupParent, code, r, err, errs)
	}
	if p := peak(); p < 8<<20 {
		t.Errorf("the run did not go below $%s: the parent's memory peak is %d", envCgroupParent, p)
	}
	code, out, _ = invoke(t, "", "doctor")
	if code != 0 || !strings.Contains(out, "cgroup parent: "+rel+" (from $"+envCgroupParent) {
		t.Errorf("doctor with $%s: exit %d, stdout %q", envCgroupParent, code, out)
	}

	t.Setenv(envCgroupParent, "stockade-no-such-parent-"+t.Name())
	code, _, errs = invoke(t, "", "run", "--", "true")
	if code != 125 || !strings.Contains(errs, "stockade-no-such-parent-") {
		t.Errorf("a missing $%s parent: exit %d, stderr %q", envCgroupParent, code, errs)
	}
	if code, _, errs = invoke(t, "", "run", "--cgroup-parent", rel, "--", "true"); code != 0 {
		t.Errorf("--cgroup-parent over $%s: exit %d, stderr %q", envCgroupParent, code, errs)
	}
	if code, _, errs = invoke(t, "", "run", "--no-cgroup", "--", "true"); code != 0 {
		t.Errorf("--no-cgroup with $%s: exit %d, stderr %q", envCgroupParent, code, errs)
	}
}

// TestAttackForgedHintsLeakHostPathsOrEscapes: the relative-file and
// module hints quote what the payload wrote on its stderr, as the missing
// script hint does. A forged FileNotFoundError naming a host file outside
// the caller's directory (by "..", or absolute) must get no hint (it would
// tell the payload's reader that the file exists), and no byte of a forged
// message may reach stockade's stderr raw past --json.
func TestAttackForgedHintsLeakHostPathsOrEscapes(t *testing.T) {
	testenv.NeedJail(t)
	t.Chdir(t.TempDir())
	// Each its own run: a hint answers the first such line only.
	for _, forged := range []string{
		`"FileNotFoundError: [Errno 2] No such file or directory: '" + "../" * 40 + "etc/passwd'"`,
		`"FileNotFoundError: [Errno 2] No such file or directory: '/etc/passwd'"`,
		`"FileNotFoundError: [Errno 2] No such file or directory: '\x1b]0;HINT-MARKER\x07\x1b[2J" + "/.." * 40 + "/etc/passwd'"`,
		`"ModuleNotFoundError: No module named '\x1b]52;c;SElOVA==\x07polars'"`,
	} {
		code, out, errs := invoke(t, "", "run", "--json", "--", "python3", "-c", "import sys; sys.stderr.write("+forged+" + '\\n'); sys.exit(1)")
		var res map[string]any
		if err := json.Unmarshal([]byte(out), &res); err != nil || code != 1 {
			t.Fatalf("%s: exit %d, stdout %q (%v), stderr %q", forged, code, out, err, errs)
		}
		if strings.ContainsAny(errs, "\x1b\x07") || strings.Contains(errs, "HINT-MARKER") {
			t.Errorf("%s: the payload's bytes reached stockade's stderr raw: %q", forged, errs)
		}
		if strings.Contains(errs, "passwd") || strings.Contains(errs, "no module") {
			t.Errorf("%s: a forged message got a hint: %q", forged, errs)
		}
	}
}

// A payload that prints a ModuleNotFoundError for a name of its choosing
// (a typo-squat) must not have stockade recommend installing that
// package: install advice only for a name the caller's own code spells.
func TestAttackForgedModuleHintNamesPackage(t *testing.T) {
	testenv.NeedJail(t)
	t.Chdir(t.TempDir())
	// The name is built at run time: the command line never spells it.
	forge := "import sys; sys.stderr.write('ModuleNotFoundError: No module named ' + repr('reqe' + 'usts') + '\\n'); sys.exit(1)"
	code, _, errs := invoke(t, "", "run", "--", "python3", "-c", forge)
	if code != 1 || !strings.Contains(errs, "No module named 'reqeusts'") {
		t.Fatalf("the forged line: exit %d, stderr %q", code, errs)
	}
	for _, line := range strings.Split(errs, "\n") {
		if strings.HasPrefix(line, "stockade:") && (strings.Contains(line, "reqeusts") || strings.Contains(line, "apt-get") || strings.Contains(line, "--pip")) {
			t.Errorf("a hint names the payload's package: %q", line)
		}
	}
	if !strings.Contains(errs, "stockade: the program imports a module the jail's Python lacks") {
		t.Errorf("no neutral hint: %q", errs)
	}
	// The caller's own script spells it: the advice names it.
	script := filepath.Join(reachable(t), "task.py")
	if err := os.WriteFile(script, []byte("import stockade_no_such_mod\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errs = invoke(t, "", "python", script)
	if code != 1 || !strings.Contains(errs, "apt-get install python3-stockade-no-such-mod") {
		t.Errorf("the caller's script's import: exit %d, stderr %q", code, errs)
	}
}
