package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// throwawayUser creates a system user for the length of the test, as an
// admin would for a scheduled agent job, and removes it after.
func throwawayUser(t *testing.T) (name string, uid, gid int) {
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

// asUser runs the built stockade as uid/gid with no supplementary groups
// and a clean environment.
func asUser(t *testing.T, bin string, uid, gid int, args ...string) (int, string, string) {
	t.Helper()
	return asUserEnv(t, bin, uid, gid, nil, args...)
}

func asUserEnv(t *testing.T, bin string, uid, gid int, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=/nonexistent", "LANG=C.UTF-8"}, env...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

// v1Delegation does what `stockade doctor` tells the admin for cgroup v1:
// a directory in each controller hierarchy, chowned to the user, at one
// relative path. Ours lives below this process's own memory cgroup (in the
// others our cgroup is the root) and is removed after. It returns the
// --cgroup-parent path.
func v1Delegation(t *testing.T, name string, uid, gid int) string {
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
		t.Skip("needs a cgroup v1 memory hierarchy (the VM covers v2)")
	}
	rel := filepath.Join(memPath, "stockade-"+name)
	var created []string
	t.Cleanup(func() {
		for i := len(created) - 1; i >= 0; i-- {
			if err := os.Remove(created[i]); err != nil {
				t.Errorf("remove the delegated cgroup: %v", err)
			}
		}
	})
	for _, c := range []string{"memory", "cpu", "cpuacct", "pids", "freezer"} {
		mnt := filepath.Join("/sys/fs/cgroup", c)
		if _, err := os.Stat(filepath.Join(mnt, "cgroup.procs")); err != nil {
			continue
		}
		// Make each missing level, remembering what we made.
		cur := mnt
		for _, part := range strings.Split(strings.Trim(rel, "/"), "/") {
			cur = filepath.Join(cur, part)
			if err := os.Mkdir(cur, 0o755); err == nil {
				created = append(created, cur)
			} else if !errors.Is(err, fs.ErrExist) {
				t.Fatal(err)
			}
		}
		for _, p := range []string{cur, filepath.Join(cur, "cgroup.procs"), filepath.Join(cur, "tasks")} {
			if err := os.Chown(p, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
	}
	return rel
}

// A normal user with a cgroup v1 delegation as `stockade doctor` describes
// it gets the full jail: memory limit enforced with verdict memory, every
// door of the selftest held, nothing left in the delegated cgroup. Without
// the delegation, run and selftest stop with the way to get one.
func TestRootlessWithDelegatedV1Cgroup(t *testing.T) {
	bin := builtBinary(t)
	name, uid, gid := throwawayUser(t)

	code, _, errs := asUser(t, bin, uid, gid, "run", "--", "python3", "-c", "print('JAIL' + 'RAN')")
	if code != 125 || !strings.Contains(errs, "a normal user needs a delegated cgroup: `stockade doctor` prints how to get one") {
		t.Fatalf("undelegated run: exit %d, stderr %q", code, errs)
	}
	// In a systemd unit (INVOCATION_ID set), the fix is the unit's setting.
	code, _, errs = asUserEnv(t, bin, uid, gid, []string{"INVOCATION_ID=0123456789abcdef"}, "run", "--", "true")
	if code != 125 || !strings.Contains(errs, "add Delegate=memory pids cpu to its [Service] section") {
		t.Fatalf("undelegated run in a unit: exit %d, stderr %q", code, errs)
	}
	code, out, _ := asUser(t, bin, uid, gid, "doctor")
	if code != 1 || !strings.Contains(out, "chown "+name+": $d $d/cgroup.procs $d/tasks") ||
		!strings.Contains(out, "--cgroup-parent stockade-"+name) {
		t.Fatalf("doctor: exit %d, output\n%s", code, out)
	}
	code, _, errs = asUser(t, bin, uid, gid, "selftest")
	if code != 125 || !strings.Contains(errs, "selftest: could not start a jail: cgroup:") {
		t.Fatalf("undelegated selftest: exit %d, stderr %q", code, errs)
	}

	parent := v1Delegation(t, name, uid, gid)
	code, out, errs = asUser(t, bin, uid, gid, "run", "--cgroup-parent", parent, "--memory", "64M", "--json", "--",
		"python3", "-c", "import os; print(os.getuid()); bytearray(200 << 20)")
	var res struct {
		Verdict, Cgroup, Stdout string
		Degraded                []string
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("exit %d, %q, %q", code, out, errs)
	}
	if res.Verdict != "memory" || res.Cgroup != "v1" || res.Stdout != "1000\n" || len(res.Degraded) != 0 {
		t.Fatalf("delegated run: exit %d, result %s, stderr %q", code, out, errs)
	}

	code, out, errs = asUser(t, bin, uid, gid, "selftest", "--cgroup-parent", parent, "--json")
	var rep struct {
		Cgroup         string
		Passed, Failed int
		Rows           []struct{ Door, Attack, Status, Happened string }
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("selftest: exit %d, %q, %q", code, out, errs)
	}
	for _, r := range rep.Rows {
		if r.Status == "FAIL" {
			t.Errorf("rootless selftest: %s / %s: %s", r.Door, r.Attack, r.Happened)
		}
	}
	if code != 0 || rep.Cgroup != "on" || rep.Passed < 40 {
		t.Fatalf("rootless selftest: exit %d, cgroup %s, %d passed, %d failed", code, rep.Cgroup, rep.Passed, rep.Failed)
	}
	for _, c := range []string{"memory", "cpu", "pids"} {
		left, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", c, parent, "stockade-*"))
		if len(left) != 0 {
			t.Errorf("left in the delegated cgroup: %v", left)
		}
	}
}
