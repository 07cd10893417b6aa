// Package clitest is test support for the tests that run the stockade
// command line as a process (cmd/stockade's and tests/e2e's): the deadline
// a command line gets, a v1 cgroup delegation, a throwaway system user, the
// selftest report as a client reads it, a `stockade serve` for a client to
// talk to (Serve). It is test support only; nothing
// outside tests imports it.
package clitest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/proctest"
	"github.com/stockade/stockade/internal/testenv"
)

// Deadline is how long a test waits on a stockade command line: for a
// run, twice its --timeout (the python profile's 10 s if none is given)
// and 30 s for set-up and teardown on a loaded machine; for the selftest
// suite, ten minutes.
func Deadline(args []string) time.Duration {
	limit := 10 * time.Second
	for i, a := range args {
		if a == "--" {
			break
		}
		if a == "selftest" {
			return 10 * time.Minute
		}
		v, ok := strings.CutPrefix(a, "--timeout=")
		if a == "--timeout" && i+1 < len(args) {
			v, ok = args[i+1], true
		}
		if d, err := time.ParseDuration(v); ok && err == nil {
			limit = d
		}
	}
	return 2*limit + 30*time.Second
}

// RunExit runs cmd to its end, by Deadline of its arguments, and
// returns its exit status and output; a command that could not be run or
// outlived its deadline fails the test.
func RunExit(t testing.TB, cmd *exec.Cmd) (int, string, string) {
	t.Helper()
	o := proctest.Run(t, cmd, Deadline(cmd.Args))
	code, ok := proctest.ExitCode(o.Err)
	if !ok {
		t.Fatal(o.Err)
	}
	return code, o.Stdout, o.Stderr
}

// OwnV1MemoryCgroup is this process's cgroup in the v1 memory hierarchy,
// as /proc/self/cgroup names it; without one the test skips, saying why.
func OwnV1MemoryCgroup(t *testing.T, skip string) string {
	t.Helper()
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	memPath := ""
	for _, line := range strings.Split(string(own), "\n") {
		if f := strings.SplitN(line, ":", 3); len(f) == 3 && strings.Contains(","+f[1]+",", ",memory,") {
			memPath = f[2]
		}
	}
	if memPath == "" {
		t.Skip(skip)
	}
	return memPath
}

// MakeV1Cgroups makes rel, each level that is missing, in each of the
// named v1 hierarchies mounted below /sys/fs/cgroup, calls made (if not
// nil) on each level it makes, and removes what it made after the test,
// deepest first. It returns rel's directory in each hierarchy there is.
func MakeV1Cgroups(t *testing.T, rel string, hierarchies []string, made func(hierarchy, dir string)) []string {
	t.Helper()
	var created, dirs []string
	t.Cleanup(func() {
		for i := len(created) - 1; i >= 0; i-- {
			if err := os.Remove(created[i]); err != nil {
				t.Errorf("remove %s: %v", created[i], err)
			}
		}
	})
	for _, h := range hierarchies {
		mnt := filepath.Join("/sys/fs/cgroup", h)
		if _, err := os.Stat(filepath.Join(mnt, "cgroup.procs")); err != nil {
			continue
		}
		cur := mnt
		for _, part := range strings.Split(strings.Trim(rel, "/"), "/") {
			cur = filepath.Join(cur, part)
			if err := os.Mkdir(cur, 0o755); err == nil {
				created = append(created, cur)
				if made != nil {
					made(h, cur)
				}
			} else if !errors.Is(err, fs.ErrExist) {
				t.Fatal(err)
			}
		}
		dirs = append(dirs, cur)
	}
	return dirs
}

// ThrowawayUser creates a system user for the length of the test, as an
// admin would for a scheduled agent job, and removes it after.
func ThrowawayUser(t *testing.T) (name string, uid, gid int) {
	t.Helper()
	if _, err := exec.LookPath("useradd"); err != nil {
		t.Skip("needs useradd/userdel (passwd)")
	}
	name = fmt.Sprintf("stkrl%d", os.Getpid())
	out, err := exec.Command("useradd", "--system", "--no-create-home", "--user-group",
		"--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", name).CombinedOutput()
	if err != nil {
		t.Fatalf("useradd: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("userdel", name).CombinedOutput(); err != nil {
			t.Errorf("userdel %s: %v: %s", name, err, out)
		}
	})
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	t.Cleanup(func() { os.RemoveAll(filepath.Join(os.TempDir(), "stockade-"+u.Uid)) })
	return name, uid, gid
}

// SelftestReport is what `stockade selftest --json` prints, as a client
// reads it.
type SelftestReport struct {
	Cgroup         string
	Passed, Failed int
	Rows           []struct{ Door, Attack, Status, Happened string }
}

// BuiltBinary is the stockade that make build made (with the embedded
// init), for a test that runs it as root with user namespaces of arbitrary
// maps; the test skips without root or the binary.
func BuiltBinary(t *testing.T) string {
	t.Helper()
	testenv.NeedRoot(t, "builds user namespaces with arbitrary maps")
	return testenv.NeedBinary(t, "with the embedded init")
}
