package main

import (
	"bytes"
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
	"github.com/stockade/stockade/internal/runlock"
	"github.com/stockade/stockade/internal/testenv"
	"github.com/stockade/stockade/jail"
)

// startInLockDir starts a stockade with a lock directory of its own whose
// payload (tagged with marker, so the host can find it) writes
// /work/secret, prints "up" and sleeps; it returns once the jail is up.
func startInLockDir(t *testing.T, lockDir, marker string) *exec.Cmd {
	t.Helper()
	cmd := stockadeIn(t, "", "run", "--timeout", "30s", "--", "python3", "-c",
		"import time\nopen('/work/secret', 'w').write('PRIVATE-'+'DATA')\nprint('up', flush=True)\ntime.sleep(30)", marker)
	cmd.Env = append(cmd.Env, runlock.DirEnv+"="+lockDir)
	before := runEntries(t)
	p, err := proctest.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// SIGTERM, not SIGKILL: a SIGKILLed stockade leaves its run
		// directory and cgroups for the next sweep of its lock directory,
		// and this one is the test's own, gone with it, so nothing would
		// ever sweep them; the host would keep them for good, named with a
		// pid some later stockade gets again.
		cmd.Process.Signal(syscall.SIGTERM)
		if o := p.Wait(30 * time.Second); o.Expired {
			t.Errorf("stockade %d did not end within 30s of SIGTERM: %s", cmd.Process.Pid, o.Overstayed())
		}
		mark := fmt.Sprintf("-%d-", cmd.Process.Pid)
		for e := range runEntries(t) {
			if !before[e] && strings.Contains(filepath.Base(e), mark) {
				t.Errorf("stockade %d left %s behind", cmd.Process.Pid, e)
			}
		}
	})
	if !p.Await(proctest.Budget(t, 30*time.Second), "up\n") {
		t.Fatalf("the jail did not come up: stdout %q, stderr %q", p.Stdout(), p.Stderr())
	}
	return cmd
}

// hostUIDOf is the host uid of the jailed python3 whose arguments carry
// marker.
func hostUIDOf(t *testing.T, marker string) string {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.HasPrefix(cmdline, []byte("python3\x00")) || !bytes.Contains(cmdline, []byte(marker)) {
			continue
		}
		status, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(status), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
				return f[1]
			}
		}
	}
	t.Fatalf("no jailed python3 with %s on the host", marker)
	return ""
}

// TestAttackUIDCollisionAcrossLockDirs: two root stockades with lock
// directories of their own (STOCKADE_LOCK_DIR, or containers with their own
// /run) both hold slot 0 of theirs. Their jails must still run as distinct
// host uids, or one jail may enter the other's run directory, signal its
// processes and spend its per-user kernel allowances.
func TestAttackUIDCollisionAcrossLockDirs(t *testing.T) {
	testenv.NeedJail(t)
	testenv.NeedRoot(t, "the per-run host uid is root's")
	mark := fmt.Sprintf("stockade-uidcoll-%d", time.Now().UnixNano())
	startInLockDir(t, filepath.Join(t.TempDir(), "runs"), mark+"-A")
	startInLockDir(t, filepath.Join(t.TempDir(), "runs"), mark+"-B")
	a, b := hostUIDOf(t, mark+"-A"), hostUIDOf(t, mark+"-B")
	if a == b {
		t.Fatalf("two concurrent jails of stockades with different lock directories share host uid %s", a)
	}
	for _, u := range []string{a, b} {
		// systemd hands 0x80000-0x6FFFFFFF to containers (UIDS-GIDS.md).
		var n uint64
		fmt.Sscan(u, &n)
		if n >= 0x80000 && n <= 0x6FFFFFFF {
			t.Errorf("jail host uid %d is in systemd's container uid range", n)
		}
	}
}

// TestAttackNeighbourWorkViaROTmp: jail B's operator binds /tmp (or the
// run base, or a lock directory) read-only; from there B would list every
// run's directory and read what a neighbour's jail writes while it runs.
// Every bind of stockade's own state, or of a directory holding it, is
// refused, and B never sees A's data.
func TestAttackNeighbourWorkViaROTmp(t *testing.T) {
	testenv.NeedJail(t)
	testenv.NeedRoot(t, "root's run base and lock directories")
	mark := fmt.Sprintf("stockade-neighbour-%d", time.Now().UnixNano())
	startInLockDir(t, filepath.Join(t.TempDir(), "runs"), mark)
	lockB := filepath.Join(t.TempDir(), "runs")
	read := "import glob, os\n" +
		"for p in glob.glob('/h/**/secret', recursive=True) + glob.glob('/h/**/r*/work/secret', recursive=True):\n" +
		"    try: print(p, open(p).read())\n" +
		"    except Exception as e: print(p, e)\n"
	for _, src := range []string{"/tmp", filepath.Dir(lockB), lockB, jail.RunBase(), filepath.Dir(jail.RunBase()), runlock.IDDir} {
		cmd := stockadeIn(t, "", "run", "--ro", src+":/h", "--", "python3", "-c", read)
		cmd.Env = append(cmd.Env, runlock.DirEnv+"="+lockB)
		code, out, errb := clitest.RunExit(t, cmd)
		if code != 125 {
			t.Errorf("--ro %s: exit %d, want 125; stdout %q, stderr %q", src, code, out, errb)
		}
		if strings.Contains(out, "PRIVATE-DATA") {
			t.Errorf("--ro %s: jail B read jail A's /work: %s", src, out)
		}
		if !strings.Contains(errb, "refusing") {
			t.Errorf("--ro %s: stderr %q does not say why it is refused", src, errb)
		}
	}
}

// TestAttackTmpBaseDirSquat: any local user can make $TMPDIR/stockade-0
// before root's first run (after a reboot or a clean of /tmp). Root's runs
// must not depend on it: their directories live under /run, where only
// root writes.
func TestAttackTmpBaseDirSquat(t *testing.T) {
	testenv.NeedJail(t)
	testenv.NeedRoot(t, "squats root's directory")
	tmp := t.TempDir()
	if err := os.Chmod(tmp, 0o1777); err != nil {
		t.Fatal(err)
	}
	squat := filepath.Join(tmp, "stockade-0")
	if err := os.Mkdir(squat, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(squat, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	cmd := stockadeIn(t, "", "run", "--", "python3", "-c", "print('ran')")
	cmd.Env = append(cmd.Env, "TMPDIR="+tmp, runlock.DirEnv+"="+filepath.Join(t.TempDir(), "runs"))
	if code, out, errb := clitest.RunExit(t, cmd); code != 0 || !strings.Contains(out, "ran") {
		t.Fatalf("with %s made by nobody: exit %d: %s%s", squat, code, out, errb)
	}
	if ents, _ := os.ReadDir(squat); len(ents) != 0 {
		t.Errorf("root's run used the squatted %s: %v", squat, ents)
	}
}

// TestAttackTmpBaseDirSquatUnprivileged: the same squat against a normal
// user without $XDG_RUNTIME_DIR, whose lock directory and run base are in
// the shared temp directory: the run goes ahead from a private directory
// of its own, says so, and leaves nothing behind.
func TestAttackTmpBaseDirSquatUnprivileged(t *testing.T) {
	bin := clitest.BuiltBinary(t)
	_, uid, gid := clitest.ThrowawayUser(t)
	// Not t.TempDir: its parent is root's 0700.
	tmp, err := os.MkdirTemp("", "stockade-squat-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	if err := os.Chmod(tmp, 0o1777); err != nil {
		t.Fatal(err)
	}
	squat := filepath.Join(tmp, fmt.Sprintf("stockade-%d", uid))
	if err := os.Mkdir(squat, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(squat, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--no-cgroup", "--", "python3", "-c", "print('JAIL' + 'RAN')")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent", "LANG=C.UTF-8", "TMPDIR=" + tmp}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
	code, out, errb := clitest.RunExit(t, cmd)
	if code != 0 || out != "JAILRAN\n" {
		t.Fatalf("with %s made by nobody: exit %d, stdout %q, stderr %q", squat, code, out, errb)
	}
	if !strings.Contains(errb, "private") {
		t.Errorf("no notice of the fallback: %q", errb)
	}
	ents, _ := os.ReadDir(tmp)
	for _, e := range ents {
		if e.Name() != filepath.Base(squat) {
			t.Errorf("left behind in the temp directory: %s", e.Name())
		}
	}
	if ents, _ := os.ReadDir(squat); len(ents) != 0 {
		t.Errorf("the run used the squatted %s: %v", squat, ents)
	}
}
