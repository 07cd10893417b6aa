package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/clitest"
)

// sharedTemp is a temp directory shaped like /tmp (root's, sticky, open to
// all) for one test, so that what a normal user's stockade leaves in it is
// the test's to see, not mixed with the host's /tmp. Not t.TempDir: its
// parent is root's 0700.
func sharedTemp(t *testing.T) string {
	t.Helper()
	tmp, err := os.MkdirTemp("", "stockade-tmp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	if err := os.Chmod(tmp, 0o1777); err != nil {
		t.Fatal(err)
	}
	return tmp
}

// entries lists dir's names, and those of its subdirectories as
// "sub/name", two levels deep.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		out = append(out, e.Name())
		subs, _ := os.ReadDir(filepath.Join(dir, e.Name()))
		for _, s := range subs {
			out = append(out, e.Name()+"/"+s.Name())
			subsubs, _ := os.ReadDir(filepath.Join(dir, e.Name(), s.Name()))
			for _, ss := range subsubs {
				out = append(out, e.Name()+"/"+s.Name()+"/"+ss.Name())
			}
		}
	}
	return out
}

// A normal user without $XDG_RUNTIME_DIR (su, cron, a CI image) keeps its
// lock directory and run directories in its own $TMPDIR/stockade-UID. The
// temp directory itself is root's and sticky, as /tmp is: that is no reason
// for a notice, nor for a private fallback per run. Runs that work, a run
// that fails (no cgroup) and doctor leave only that directory, empty.
func TestRootlessWithoutRuntimeDirUsesItsBaseSilently(t *testing.T) {
	bin := clitest.BuiltBinary(t)
	_, uid, gid := clitest.ThrowawayUser(t)
	tmp := sharedTemp(t)
	env := []string{"TMPDIR=" + tmp}
	for i := range 2 {
		code, out, errs := asUserEnv(t, bin, uid, gid, env, "run", "--no-cgroup", "--", "python3", "-c", "print('JAIL' + 'RAN')")
		if code != 0 || out != "JAILRAN\n" {
			t.Fatalf("run %d: exit %d, stdout %q, stderr %q", i, code, out, errs)
		}
		if errs != "stockade: degraded: cgroup: none (no memory, CPU or pids limit; rlimits only)\n" {
			t.Errorf("run %d: stderr says more than the degraded cgroup: %q", i, errs)
		}
	}
	if code, _, errs := asUserEnv(t, bin, uid, gid, env, "run", "--", "true"); code != 125 || !strings.Contains(errs, "delegated cgroup") {
		t.Errorf("run without a cgroup: exit %d, stderr %q", code, errs)
	}
	if code, out, errs := asUserEnv(t, bin, uid, gid, env, "doctor"); code != 1 || !strings.Contains(out, "default jail: FAILED") {
		t.Errorf("doctor: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	onlyUserDir(t, tmp, uid)
}

// onlyUserDir checks that all the temp directory holds is the user's
// stockade directory, with no run directory and no run lock in it (the
// font cache and the id numbers stay, as they are meant to).
func onlyUserDir(t *testing.T, tmp string, uid int) {
	t.Helper()
	base := fmt.Sprintf("stockade-%d", uid)
	got := entries(t, tmp)
	if !slices.Contains(got, base+"/runs") {
		t.Errorf("no lock directory %s/runs: %v", base, got)
	}
	for _, e := range got {
		if e != base && !strings.HasPrefix(e, base+"/") || strings.HasPrefix(e, base+"/runs/") || strings.HasPrefix(e, base+"/dirs/") {
			t.Errorf("left in the temp directory: %s", e)
		}
	}
}

// startAs starts the built stockade as uid/gid, as asUserEnv runs it, and
// waits for the first line of its stdout to be want.
func startAs(t *testing.T, bin string, uid, gid int, env []string, want string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=/nonexistent", "LANG=C.UTF-8"}, env...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- l
	}()
	select {
	case l := <-line:
		if l != want+"\n" {
			t.Fatalf("first line %q, want %q", l, want)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the jail did not start within 60 s")
	}
	return cmd
}

// TestAttackSquatLeavesKilledRunsBehind: with its usual base squatted by
// another user, a normal user's run goes from a private fallback base. One
// killed with SIGKILL cannot remove it; the user's next run must, as it
// sweeps the lock directory's dead slots, or every squatted-and-killed run
// would leave a run directory (with its /work) in the temp directory for
// good.
func TestAttackSquatLeavesKilledRunsBehind(t *testing.T) {
	bin := clitest.BuiltBinary(t)
	_, uid, gid := clitest.ThrowawayUser(t)
	tmp := sharedTemp(t)
	squat := filepath.Join(tmp, fmt.Sprintf("stockade-%d", uid))
	if err := os.Mkdir(squat, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(squat, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	env := []string{"TMPDIR=" + tmp}
	killed := startAs(t, bin, uid, gid, env, "up", "run", "--no-cgroup", "--timeout", "60s", "--",
		"python3", "-c", "import time; print('up', flush=True); time.sleep(60)")
	killed.Process.Signal(syscall.SIGKILL)
	killed.Wait()
	var fallbacks []string
	for _, e := range entries(t, tmp) {
		if strings.HasPrefix(e, filepath.Base(squat)+".") && !strings.Contains(e, "/") {
			fallbacks = append(fallbacks, e)
		}
	}
	if len(fallbacks) != 1 {
		t.Fatalf("the killed run's private base: %v, want one (entries %v)", fallbacks, entries(t, tmp))
	}

	code, out, errs := asUserEnv(t, bin, uid, gid, env, "run", "--no-cgroup", "--", "python3", "-c", "print('JAIL' + 'RAN')")
	if code != 0 || out != "JAILRAN\n" {
		t.Fatalf("the next run: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if !strings.Contains(errs, "removed the leftovers") || !strings.Contains(errs, fallbacks[0]) {
		t.Errorf("the next run did not say it removed %s: %q", fallbacks[0], errs)
	}
	if got := entries(t, tmp); !slices.Equal(got, []string{filepath.Base(squat)}) {
		t.Errorf("left in the temp directory: %v, want only the squat", got)
	}
}

// A normal user's stockade in a user namespace that maps only its root
// (`unshare -Ur`, as some CI runners start jobs) shares the host's /run,
// whose /run/stockade is host root's: that root is not this one. The run
// goes ahead from the user's own base, keyed by the uid the namespace's
// root is on the host, and leaves it empty.
func TestUserNamespaceMappingOnlyItsRootSharingHostRun(t *testing.T) {
	bin := clitest.BuiltBinary(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare (util-linux)")
	}
	_, uid, gid := clitest.ThrowawayUser(t)
	// Host root's, as any root run makes it: the directory in the way.
	if err := os.MkdirAll("/run/stockade", 0o711); err != nil {
		t.Fatal(err)
	}
	tmp := sharedTemp(t)
	cmd := exec.Command("unshare", "-Ur", bin, "run", "--no-cgroup", "--", "python3", "-c",
		"import os; print('JAIL' + 'RAN', open('/proc/self/uid_map').read().split())")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent", "LANG=C.UTF-8", "TMPDIR=" + tmp}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
	code, out, errs := clitest.RunExit(t, cmd)
	if code != 0 || out != "JAILRAN ['1000', '0', '1']\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if strings.Contains(errs, "remove") || strings.Contains(errs, "/run/stockade") {
		t.Errorf("stderr %q", errs)
	}
	onlyUserDir(t, tmp, uid)
	base := fmt.Sprintf("stockade-%d", uid)
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(tmp, base), &st); err != nil || int(st.Uid) != uid {
		t.Errorf("%s: owner %d (%v), want the user's host uid %d", base, st.Uid, err, uid)
	}
}

// TestAttackNestedUserNamespaceRootTakenForHostRoot: a user namespace made
// by the root of another (a CI job's or a rootless container's, mapping
// host uid 4242 as its root and subordinate ids) that maps the outer ids
// one to one shows uid_map "0 0 1" (and "1 1 65536"): its root is the outer namespace's
// root, a normal user on the host. Read one level up only, that map made
// stockade take itself for host root, use host root's /run/stockade, which
// both namespaces share with the host, and stop every run on it (issue
// 21's failure, one namespace down).
func TestAttackNestedUserNamespaceRootTakenForHostRoot(t *testing.T) {
	bin := clitest.BuiltBinary(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare (util-linux)")
	}
	// Host root's, as any root run makes it: the directory in the way.
	if err := os.MkdirAll("/run/stockade", 0o711); err != nil {
		t.Fatal(err)
	}
	tmp := sharedTemp(t)
	// The outer root makes the inner namespace and writes its maps, as a
	// container runtime inside the job would.
	const script = `unshare -U sh -c 'while [ -z "$(cat /proc/self/uid_map)" ]; do sleep 0.01; done; exec "$0" "$@"' "$0" "$@" &
pid=$!
until [ "$(readlink /proc/$pid/ns/user)" != "$(readlink /proc/self/ns/user)" ]; do sleep 0.01; done
printf '0 0 1\n1 1 65536\n' >/proc/$pid/uid_map && printf '0 0 1\n1 1 65536\n' >/proc/$pid/gid_map || kill $pid
wait $pid`
	cmd := exec.Command("/bin/sh", "-c", script, bin, "run", "--no-cgroup", "--", "python3", "-c",
		"print('JAIL' + 'RAN', open('/proc/self/uid_map').read().split()[1:])")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent", "LANG=C.UTF-8", "TMPDIR=" + tmp}
	cmd.Dir = "/"
	outer := []syscall.SysProcIDMap{{ContainerID: 0, HostID: 4242, Size: 1}, {ContainerID: 1, HostID: nsBase + 1, Size: 65536}}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: outer, GidMappings: outer,
		GidMappingsEnableSetgroups: true,
		Credential:                 &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true},
	}
	code, out, errs := clitest.RunExit(t, cmd)
	if code != 0 || !strings.HasPrefix(out, "JAILRAN ") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if strings.Contains(errs, "/run/stockade") {
		t.Errorf("stderr %q", errs)
	}
	for _, e := range entries(t, tmp) {
		if strings.Contains(e, "/runs/") || strings.Contains(e, "/dirs/") {
			t.Errorf("left in the temp directory: %s", e)
		}
	}
}
