package cgroup

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/testenv"
	"golang.org/x/sys/unix"
)

// holdFlock has another user (nobody) open dir and hold flock(how) on it
// until the test ends; it returns once the lock is held.
func holdFlock(t *testing.T, dir, how string) {
	t.Helper()
	testenv.NeedRoot(t, "holds the lock as another user")
	holder := exec.Command("/usr/bin/python3", "-c", `import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.flock(fd, getattr(fcntl, sys.argv[2]))
print("held", flush=True)
time.sleep(120)`, dir, how)
	holder.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Skipf("python3 as nobody: %v", err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "held\n" {
		t.Fatalf("the other user could not take the lock on %s: %q", dir, line)
	}
}

// reachableDir is a directory every user can open, as a cgroup directory
// is (cgroupfs makes them 0755).
func reachableDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	os.Chmod(filepath.Dir(dir), 0o755)
	os.Chmod(dir, 0o755)
	return dir
}

// TestAttackCgroupParentLockHeldByAnotherUser: on cgroup v2 every
// NewManager takes a shared flock on its parent cgroup before it reads it,
// and a stockade undoing its leaf takes it exclusively. The parent is a
// cgroup directory, 0755: any local user can open it and flock it. With
// LOCK_EX held, every run (and every request of stockade serve) in that
// parent waited without end before its jail started; with LOCK_SH held,
// stockade never undid its leaf, and systemd could not start the unit's
// next process in the parent. The lock must be one only stockade's user
// can take.
func TestAttackCgroupParentLockHeldByAnotherUser(t *testing.T) {
	for _, c := range []struct {
		held string // what the other user holds on the parent
		how  int    // what stockade then takes
	}{
		{"LOCK_EX", unix.LOCK_SH},                // NewManager
		{"LOCK_SH", unix.LOCK_EX | unix.LOCK_NB}, // Restore
	} {
		parent := reachableDir(t)
		holdFlock(t, parent, c.held)
		t.Cleanup(func() { os.Remove(parentLockPath(parent)) })
		got := make(chan error, 1)
		go func() {
			fd, err := lockParent(parent, c.how)
			if err == nil {
				defer unix.Close(fd)
			}
			got <- err
		}()
		select {
		case err := <-got:
			if err != nil {
				t.Errorf("with %s held by nobody: %v", c.held, err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("with %s held by nobody (uid 65534): the lock on the parent still waited after 10 s", c.held)
		}
	}
}
