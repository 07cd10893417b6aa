package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/clitest"
	"github.com/stockade/stockade/internal/proctest"
	"github.com/stockade/stockade/internal/runlock"
	"github.com/stockade/stockade/internal/testenv"
	"github.com/stockade/stockade/jail"
)

// ownCgroupDirs maps each cgroup hierarchy's mount (v1: by controller) to
// this process's directory in it, from /proc/self/cgroup.
func ownCgroupDirs(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	dirs := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || strings.HasPrefix(parts[1], "name=") {
			continue
		}
		if parts[1] == "" {
			mnt := "/sys/fs/cgroup"
			if _, err := os.Stat("/sys/fs/cgroup/unified/cgroup.procs"); err == nil {
				mnt = "/sys/fs/cgroup/unified"
			}
			dirs["unified"] = filepath.Join(mnt, parts[2])
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			dirs[c] = filepath.Join("/sys/fs/cgroup", strings.Split(parts[1], ",")[0], parts[2])
		}
	}
	return dirs
}

// siblingMemoryCgroups makes n memory cgroups below this process's own, as
// two systemd services or two CI jobs have: a stockade in each shares the
// cpu, cpuacct, pids and freezer parents (on this kind of host, the
// hierarchy roots) with the others but not the memory parent.
func siblingMemoryCgroups(t *testing.T, n int) []string {
	t.Helper()
	own := ownCgroupDirs(t)
	mem, ok := own["memory"]
	if !ok || own["unified"] != "" && own["cpu"] == "" {
		t.Skip("needs cgroup v1 (or hybrid) with a memory hierarchy")
	}
	var out []string
	for i := range n {
		d := filepath.Join(mem, fmt.Sprintf("stockadetest-%d-%s-%d", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "_"), i))
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatalf("sibling cgroup: %v", err)
		}
		out = append(out, d)
		t.Cleanup(func() {
			// Our stockades have exited; a cgroup v1 directory goes with
			// rmdir once its tasks are gone, which may take a moment. A
			// failed test may have left runs' groups inside.
			for range 100 {
				if subs, _ := os.ReadDir(d); len(subs) > 0 {
					for _, s := range subs {
						if s.IsDir() {
							syscall.Rmdir(filepath.Join(d, s.Name()))
						}
					}
				}
				if err := syscall.Rmdir(d); err == nil || err == syscall.ENOENT {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
			t.Errorf("sibling cgroup %s not removable", d)
		})
	}
	return out
}

// stockadeIn makes a command that runs this test binary as the stockade
// CLI, moved into memory cgroup dir ("" = stay in ours) before it starts.
func stockadeIn(t *testing.T, dir string, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	script := `exec "$0" "$@"`
	if dir != "" {
		script = `echo $$ > "$STOCKADE_TEST_CG/cgroup.procs" && ` + script
	}
	cmd := exec.Command("/bin/sh", append([]string{"-c", script, exe}, args...)...)
	cmd.Env = append(os.Environ(), "STOCKADE_TEST_MAIN=1", "STOCKADE_TEST_CG="+dir)
	return cmd
}

// ranByAny reports whether name is of a run made by one of pids, and which.
func ranByAny(name string, pids map[int]bool) (int, bool) {
	slot, rest, ok := strings.Cut(strings.TrimPrefix(name, "stockade."), "-")
	if !ok || len(slot) < 2 || slot[0] != 'r' {
		return 0, false
	}
	p, _, _ := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(p)
	return pid, err == nil && pids[pid]
}

// runPlaces are the directories where runs leave their run directory and
// cgroups: the run directory base (root's and the temp directory's),
// every hierarchy's directory of ours (on this host the roots, for cpu,
// cpuacct, pids and freezer) and the given extra memory parents.
func runPlaces(t *testing.T, extra ...string) []string {
	t.Helper()
	dirs := []string{jail.RunBase(), filepath.Join(os.TempDir(), fmt.Sprintf("stockade-%d", os.Getuid()))}
	for _, d := range ownCgroupDirs(t) {
		dirs = append(dirs, d)
	}
	return append(dirs, extra...)
}

// runEntries lists what the run places hold now, to tell a test's own
// leftovers from older ones: a dead stockade's pid is reused (pid_max is
// often 32768), and a leftover named with it must not count against the
// new stockade.
func runEntries(t *testing.T, extra ...string) map[string]bool {
	t.Helper()
	seen := map[string]bool{}
	for _, d := range runPlaces(t, extra...) {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			seen[filepath.Join(d, e.Name())] = true
		}
	}
	return seen
}

// leftoversOfAny lists run directories and cgroups of runs made by any of
// pids in the run places that were not there before.
func leftoversOfAny(t *testing.T, pids map[int]bool, before map[string]bool, extra ...string) []string {
	t.Helper()
	var left []string
	for _, d := range runPlaces(t, extra...) {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			p := filepath.Join(d, e.Name())
			if _, ok := ranByAny(e.Name(), pids); ok && !before[p] {
				left = append(left, p)
			}
		}
	}
	return left
}

// onlyIn is a without b.
func onlyIn(a, b map[int]bool) map[int]bool {
	out := map[int]bool{}
	for k := range a {
		if !b[k] {
			out[k] = true
		}
	}
	return out
}

// falseNotices returns the stockade: lines of stderr that speak of a run of
// one of pids (all alive while they ran): a sweep must never take a live
// run's cgroup or directory for a leftover.
func falseNotices(stderr string, pids map[int]bool) []string {
	var bad []string
	for _, line := range strings.Split(stderr, "\n") {
		for _, f := range strings.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == '/' || r == ',' }) {
			if _, ok := ranByAny(f, pids); ok {
				bad = append(bad, line)
				break
			}
		}
	}
	return bad
}

type runOutcome struct {
	expired    bool // outlived clitest.Deadline: killed, parseError says what it printed
	pid        int
	res        jail.Result
	code       int
	stdout     string
	stderr     string
	parseError error
}

// runStockade runs one stockade --json to the end, or to clitest.Deadline:
// one still running then has outlived its timeout, and its parseError says
// so with what it had printed. It is called from the tests' goroutines,
// which report the outcome.
func runStockade(t *testing.T, dir string, args ...string) runOutcome {
	args = append([]string{"run", "--json"}, args...)
	p, err := proctest.Start(stockadeIn(t, dir, args...))
	if err != nil {
		return runOutcome{parseError: err}
	}
	o := runOutcome{pid: p.Cmd.Process.Pid}
	w := p.Wait(proctest.Budget(t, clitest.Deadline(args)))
	o.code, o.stdout, o.stderr = w.Code(), w.Stdout, w.Stderr
	if w.Expired {
		o.expired, o.parseError = true, errors.New(w.Overstayed())
		return o
	}
	o.parseError = json.Unmarshal([]byte(w.Stdout), &o.res)
	return o
}

// TestAttackConcurrentStockadesKillEachOther runs stockades in four sibling
// memory cgroups at once, and sixteen in one parent at once. Before runs
// owned their groups through a lock in every hierarchy, a stockade took a
// concurrent one's group in the shared cpu/pids/freezer hierarchies for a
// crash leftover and killed its jail (verdict signal, 137), or removed it
// under it (125), and said so on stderr.
func TestAttackConcurrentStockadesKillEachOther(t *testing.T) {
	testenv.NeedJail(t)
	// Leftovers of the host's other stockades would be swept by these runs,
	// and their pid labels could be ours: the notice check must see ours only.
	privateLockDir(t)
	sibs := siblingMemoryCgroups(t, 4)
	before := runEntries(t, sibs...)
	type job struct{ dir, token string }
	var jobs []job
	for round := range 2 {
		for i, d := range sibs {
			for k := range 4 {
				jobs = append(jobs, job{d, fmt.Sprintf("sib%d-r%d-k%d", i, round, k)})
			}
		}
	}
	for k := range 16 {
		jobs = append(jobs, job{"", fmt.Sprintf("same-%d", k)})
	}
	var mu sync.Mutex
	pids := map[int]bool{}
	var outcomes []runOutcome
	var wg sync.WaitGroup
	// Two waves: the sibling runs (16 at once), then 16 in one parent.
	for _, wave := range [][]job{jobs[:32], jobs[32:]} {
		for _, j := range wave {
			wg.Add(1)
			go func() {
				defer wg.Done()
				o := runStockade(t, j.dir, "--", "python3", "-c",
					"import time, sys; time.sleep(0.3); print(sys.argv[1])", j.token)
				mu.Lock()
				pids[o.pid] = true
				outcomes = append(outcomes, o)
				mu.Unlock()
			}()
		}
		wg.Wait()
	}
	bad := 0
	for _, o := range outcomes {
		ok := o.parseError == nil && o.code == 0 && o.res.Verdict == jail.VerdictOK &&
			(strings.HasPrefix(o.res.Stdout, "sib") || strings.HasPrefix(o.res.Stdout, "same"))
		if !ok {
			bad++
			t.Errorf("stockade %d: exit %d, verdict %s, stdout %q, error %v, stderr %q (%v)", o.pid, o.code, o.res.Verdict, o.res.Stdout, o.res.Error, o.stderr, o.parseError)
		}
		if f := falseNotices(o.stderr, pids); len(f) > 0 {
			t.Errorf("stockade %d spoke of a live run: %q", o.pid, f)
		}
	}
	t.Logf("%d concurrent stockades (32 in 4 sibling memory cgroups, 16 in one), %d lost or killed", len(outcomes), bad)
	if left := leftoversOfAny(t, pids, before, sibs...); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// privateLockDir gives this test's stockades a lock directory of their own:
// the host's other stockades (other test runs, other users of the machine)
// sweep every dead run's leftovers in theirs, and would sweep the ones this
// test means to watch before it looks.
func privateLockDir(t *testing.T) {
	t.Setenv(runlock.DirEnv, filepath.Join(t.TempDir(), "runs"))
}

// slotRecord finds the run lock slot a stockade process holds (an open
// fd on a file in the lock directory; made with O_TMPFILE, its fd link
// reads "#<inode> (deleted)" even once it has a name) and returns the
// slot's path and what it recorded.
func slotRecord(t *testing.T, pid int) (string, []string) {
	t.Helper()
	dir := runlock.DefaultDir() + "/"
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		link := fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())
		target, err := os.Readlink(link)
		if err != nil || !strings.HasPrefix(target, dir) {
			continue
		}
		var st, slotSt syscall.Stat_t
		if syscall.Stat(link, &st) != nil {
			continue
		}
		ents, _ := os.ReadDir(dir)
		target = ""
		for _, e := range ents {
			if syscall.Stat(dir+e.Name(), &slotSt) == nil && slotSt.Ino == st.Ino && slotSt.Dev == st.Dev {
				target = dir + e.Name()
			}
		}
		if target == "" {
			continue
		}
		b, err := os.ReadFile(link)
		if err != nil {
			t.Fatal(err)
		}
		var paths []string
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if _, p, ok := strings.Cut(line, "\t"); ok {
				paths = append(paths, p)
			}
		}
		return target, paths
	}
	return "", nil
}

// startUntilUp starts a stockade in dir whose payload writes /work/data,
// prints "up" and sleeps, and returns once it printed; one that does not
// within 30 s is killed, and the error says what it printed. The caller
// ends it.
func startUntilUp(t *testing.T, dir, marker string) (*proctest.Proc, error) {
	t.Helper()
	p, err := proctest.Start(stockadeIn(t, dir, "run", "--timeout", "60s", "--", "python3", "-c",
		"import time\nopen('/work/data', 'w').write('x' * 4096)\nprint('up', flush=True)\ntime.sleep(60)", marker))
	if err != nil {
		return nil, err
	}
	if !p.Await(proctest.Budget(t, 30*time.Second), "up\n") {
		p.Kill()
		return nil, fmt.Errorf("the jail did not come up in 30 s: stdout %q, stderr %q", p.Stdout(), p.Stderr())
	}
	return p, nil
}

// TestSIGKILLedStockadeSweptFromAnotherParent: a stockade killed with
// SIGKILL leaves its cgroup in every hierarchy and its run directory with
// the /work data; the next stockade to start, here from a sibling memory
// cgroup, removes all of it (and only that), and says so with a stockade:
// notice.
func TestSIGKILLedStockadeSweptFromAnotherParent(t *testing.T) {
	testenv.NeedJail(t)
	privateLockDir(t)
	sibs := siblingMemoryCgroups(t, 2)
	marker := fmt.Sprintf("stockade-sweep-%d", time.Now().UnixNano())
	p, err := startUntilUp(t, sibs[0], marker)
	if err != nil {
		t.Fatal(err)
	}
	cmd := p.Cmd
	slot, paths := slotRecord(t, cmd.Process.Pid)
	if slot == "" || len(paths) < 2 {
		p.Kill()
		t.Fatalf("stockade %d holds no run lock with a record (%q %v)", cmd.Process.Pid, slot, paths)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	p.Wait(10 * time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for len(procsWith(marker)) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if left := procsWith(marker); len(left) > 0 {
		t.Fatalf("jailed processes outlived the killed stockade: %v", left)
	}
	hierarchies := 0
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("recorded %s is not there after the SIGKILL: %v", p, err)
		}
		if strings.HasPrefix(p, "/sys/fs/cgroup/") {
			hierarchies++
		}
		if strings.HasPrefix(p, sibs[0]) {
			t.Logf("memory group in the killed stockade's own parent: %s", p)
		}
	}
	t.Logf("SIGKILLed stockade %d left %d cgroup directories and its run directory (slot %s)", cmd.Process.Pid, hierarchies, slot)

	o := runStockade(t, sibs[1], "--", "true")
	if o.code != 0 || o.res.Verdict != jail.VerdictOK {
		t.Fatalf("next run: exit %d %s %q", o.code, o.res.Verdict, o.stderr)
	}
	for _, p := range paths {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s survived the next start from another parent", p)
		}
	}
	if b, err := os.ReadFile(slot); err == nil && strings.Contains(string(b), paths[0]) {
		t.Errorf("slot %s still records the dead run", slot)
	}
	if !strings.Contains(o.stderr, "stockade: removed the leftovers of a stockade that died") || !strings.Contains(o.stderr, filepath.Base(paths[0])) {
		t.Errorf("no stockade: notice about the sweep on the next run's stderr: %q", o.stderr)
	}
}

// TestSoakSiblingCgroups: four sibling memory cgroups, four stockades at
// once in each, STOCKADE_SOAK runs per cgroup (40 by default; make soak:
// 500), a mix of normal runs, timeouts and stockades killed with SIGKILL
// mid-run. Not one run may be lost or killed by another, no notice may
// speak of a live run, and once the last start has swept, nothing of any
// of them is left: process, cgroup in any hierarchy, run directory, slot.
func TestSoakSiblingCgroups(t *testing.T) {
	testenv.NeedJail(t)
	if testing.Short() {
		t.Skip("soak: skipped under -short")
	}
	privateLockDir(t) // as in TestAttackConcurrentStockadesKillEachOther
	perCgroup := 40
	if v := os.Getenv("STOCKADE_SOAK"); v != "" {
		var err error
		if perCgroup, err = strconv.Atoi(v); err != nil || perCgroup < 1 {
			t.Fatalf("STOCKADE_SOAK=%q: want a positive number of runs per cgroup", v)
		}
	}
	const cgroups, concurrency = 4, 4
	sibs := siblingMemoryCgroups(t, cgroups)
	before := runEntries(t, sibs...)
	marker := fmt.Sprintf("stockade-soak-sib-%d", time.Now().UnixNano())

	var mu sync.Mutex
	pids := map[int]bool{}   // every stockade of the soak
	alive := map[int]bool{}  // those that were not killed: no notice may name their runs
	killed := map[int]bool{} // pids are reused (pid_max is often 32768): one may be in alive too
	counts := map[string]int{}
	var bad []string
	fail := func(format string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		if bad = append(bad, fmt.Sprintf(format, a...)); len(bad) <= 10 {
			t.Errorf(format, a...)
		}
	}
	var notices []string
	// A run that outlived its deadline stops the soak: each costs the
	// deadline, and one is enough to know the timeout did not fire.
	abort := make(chan struct{})
	var abortOnce sync.Once
	one := func(dir string, i int) {
		kind := "normal"
		switch {
		case i%5 == 4:
			kind = "kill-9"
		case i%7 == 3:
			kind = "timeout"
		}
		var o runOutcome
		switch kind {
		case "kill-9":
			p, err := startUntilUp(t, dir, marker)
			if err != nil {
				fail("kill-9 run in %s: %v", filepath.Base(dir), err)
				return
			}
			mu.Lock()
			pids[p.Cmd.Process.Pid], killed[p.Cmd.Process.Pid] = true, true
			mu.Unlock()
			p.Cmd.Process.Signal(syscall.SIGKILL)
			p.Wait(10 * time.Second)
		case "timeout":
			o = runStockade(t, dir, "--timeout", "300ms", "--", "python3", "-c", "while True: pass", marker)
			if o.code != jail.ExitTimeout || o.res.Verdict != jail.VerdictTimeout {
				fail("timeout run in %s: exit %d, verdict %s, stderr %q (%v)", filepath.Base(dir), o.code, o.res.Verdict, o.stderr, o.parseError)
			}
		default:
			token := fmt.Sprintf("run-%d", i)
			o = runStockade(t, dir, "--", "python3", "-c", "import sys; print(sys.argv[1])", token, marker)
			if o.code != 0 || o.res.Verdict != jail.VerdictOK || o.res.Stdout != token+"\n" {
				fail("normal run in %s: exit %d, verdict %s, stdout %q, error %v, stderr %q (%v)", filepath.Base(dir), o.code, o.res.Verdict, o.res.Stdout, o.res.Error, o.stderr, o.parseError)
			}
		}
		if o.expired {
			abortOnce.Do(func() { close(abort) })
		}
		mu.Lock()
		defer mu.Unlock()
		counts[kind]++
		if o.pid != 0 {
			pids[o.pid], alive[o.pid] = true, true
			if o.stderr != "" {
				notices = append(notices, o.stderr)
			}
		}
	}
	begin := time.Now()
	var wg sync.WaitGroup
	for _, d := range sibs {
		work := make(chan int)
		for range concurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range work {
					one(d, i)
				}
			}()
		}
		go func() {
			defer close(work)
			for i := range perCgroup {
				select {
				case work <- i:
				case <-abort:
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(begin)

	// The last killed stockades' leftovers wait for the next start.
	if o := runStockade(t, sibs[0], "--", "true"); o.code != 0 {
		t.Errorf("final run: exit %d, stderr %q", o.code, o.stderr)
	}
	for _, n := range notices {
		if f := falseNotices(n, onlyIn(alive, killed)); len(f) > 0 {
			fail("a notice spoke of a run whose stockade was alive: %q", f)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(procsWith(marker)) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if left := procsWith(marker); len(left) > 0 {
		t.Errorf("jailed processes survived: %v", left)
	}
	if left := leftoversOfAny(t, pids, before, sibs...); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	slots, _ := os.ReadDir(runlock.DefaultDir())
	for _, s := range slots {
		b, _ := os.ReadFile(filepath.Join(runlock.DefaultDir(), s.Name()))
		for _, f := range strings.Fields(string(b)) {
			if pid, ok := ranByAny(filepath.Base(f), pids); ok {
				t.Errorf("slot %s still records a run of stockade %d: %s", s.Name(), pid, f)
				break
			}
		}
	}
	total := cgroups * perCgroup
	t.Logf("%d runs (%v) in %d sibling cgroups, %d at once in each, in %v (%.1f runs/s); %d ended wrongly",
		total, counts, cgroups, concurrency, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds(), len(bad))
}
