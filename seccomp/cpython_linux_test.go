package seccomp

import (
	"bufio"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestCPythonSuite runs modules of CPython's own regression suite (Debian's
// libpython3.11-testsuite) under the python policy, one helper run per
// module, and fails on a failing module or any refused call. It takes
// minutes, so it runs only when STOCKADE_CPYTHON_TESTS is set: to "list" for
// the modules chosen in cpython_tests.txt, or to module names.
// STOCKADE_CPYTHON_FLAGS adds regrtest flags (-v to see a failure).
func TestCPythonSuite(t *testing.T) {
	sel := os.Getenv("STOCKADE_CPYTHON_TESTS")
	if sel == "" {
		t.Skip("set STOCKADE_CPYTHON_TESTS=list (or module names) to run CPython's regression tests under the filter")
	}
	requirePython(t)
	if _, err := os.Stat("/usr/lib/python3.11/test/regrtest.py"); err != nil {
		t.Skipf("CPython's test suite is not installed: %v", err)
	}
	modules := strings.Fields(sel)
	expected := map[string]map[string]bool{}
	if sel == "list" {
		var err error
		if modules, expected, err = readTestList("cpython_tests.txt"); err != nil {
			t.Fatal(err)
		}
	}
	defer func(d time.Duration) { helperTimeout = d }(helperTimeout)
	helperTimeout = 20 * time.Minute

	var mu sync.Mutex
	results := map[string]string{}
	sem := make(chan struct{}, 2)
	var wg sync.WaitGroup
	for _, m := range modules {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			pyArgs := append([]string{"-m", "test", "-j1", "--timeout=900"}, strings.Fields(os.Getenv("STOCKADE_CPYTHON_FLAGS"))...)
			args, _ := json.Marshal(append(pyArgs, m))
			start := time.Now()
			run := runHelper(t, "exec", "python", string(args))
			verdict := "pass"
			if run.Err != nil {
				verdict = "FAIL (" + run.Err.Error() + ")"
				t.Errorf("%s: %v\n%s", m, run.Err, tail(run.Stdout, tailBytes))
			}
			if len(run.Blocked) > 0 {
				verdict += "; refused: " + blockedSummary(run.Blocked)
			}
			for _, b := range run.Blocked {
				if !expected[m][b.Name] {
					t.Errorf("%s made an unexpected refused call: %s x%d", m, b.Example, b.Count)
				}
			}
			mu.Lock()
			results[m] = verdict + " in " + time.Since(start).Round(time.Second).String()
			mu.Unlock()
		}()
	}
	wg.Wait()
	for _, m := range modules {
		t.Logf("%-32s %s", m, results[m])
	}
}

// readTestList returns the modules of cpython_tests.txt (the first word of
// each line that is not blank, a comment or an "exclude" line) and the calls
// each is expected to have refused (its refuses= field).
func readTestList(path string) ([]string, map[string]map[string]bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	var mods []string
	refuses := map[string]map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] == "exclude" {
			continue
		}
		mods = append(mods, fields[0])
		refuses[fields[0]] = map[string]bool{}
		for _, f := range fields[1:] {
			if calls, ok := strings.CutPrefix(f, "refuses="); ok {
				for _, c := range strings.Split(calls, ",") {
					refuses[fields[0]][c] = true
				}
			}
		}
	}
	return mods, refuses, sc.Err()
}

// tailBytes is how much of a failing module's output the test shows.
const tailBytes = 3000

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// TestCPythonListParses keeps cpython_tests.txt well formed: modules listed
// once, each refuses= naming a call the python policy refuses or rules on.
func TestCPythonListParses(t *testing.T) {
	mods, refuses, err := readTestList("cpython_tests.txt")
	if err != nil {
		t.Fatal(err)
	}
	if len(mods) < 50 {
		t.Errorf("only %d modules", len(mods))
	}
	p, _ := Lookup("python")
	ruled := map[string]bool{}
	for _, r := range p.AllowIf {
		ruled[r.Syscall] = true
	}
	seen := map[string]bool{}
	for _, m := range mods {
		if seen[m] {
			t.Errorf("%s listed twice", m)
		}
		seen[m] = true
		for c := range refuses[m] {
			if !p.Refused(c) && !ruled[c] {
				t.Errorf("%s: refuses=%s, which the python policy neither refuses nor rules on", m, c)
			}
		}
	}
}
