package cgroup

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/testenv"
	"golang.org/x/sys/unix"
)

const python = "/usr/bin/python3"

// hostMode detects the host's mode without NewManager's side effects, so a
// test for the other world skips before touching anything.
func hostMode(t testing.TB) Mode {
	t.Helper()
	l, err := detectHost()
	if err != nil {
		t.Skipf("no usable cgroup filesystem: %v", err)
	}
	return l.mode
}

// testSubdir is unique per test and process, and deliberately not
// a stockade group, so nothing that removes stale groups ever
// takes it for a stale group.
func testSubdir(t testing.TB) string {
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	return fmt.Sprintf("stockadetest-%d-%s", os.Getpid(), name)
}

// isolatedManager is a Manager whose parent is a fresh test-only level
// below our own cgroup in every hierarchy, removed again after the test, so
// its groups never meet anything but this test's.
func isolatedManager(t testing.TB, want Mode) *Manager {
	t.Helper()
	testenv.NeedRoot(t, "creates cgroups")
	mode := hostMode(t)
	if want != "" && mode != want {
		t.Skipf("host is cgroup %s; this test is for %s", mode, want)
	}
	if mode == V2 {
		// The test level can only get controllers that our own cgroup
		// enables for its children; a plain manager sets that up.
		if _, err := NewManager(Options{Logf: t.Logf}); err != nil {
			t.Fatalf("NewManager: %v", err)
		}
	}
	m, err := NewManager(Options{Logf: t.Logf, subdir: testSubdir(t)})
	if m != nil {
		t.Cleanup(func() { removeTestParents(t, m) })
	}
	if err != nil {
		t.Fatalf("NewManager: %v", err)
	}
	return m
}

func removeTestParents(t testing.TB, m *Manager) {
	for _, h := range m.hiers {
		if !strings.Contains(h.parent, "stockadetest-") {
			continue
		}
		if err := unix.Rmdir(h.parent); err != nil && err != unix.ENOENT {
			t.Errorf("remove test parent %s: %v", h.parent, err)
		}
		os.Remove(parentLockPath(h.parent)) // on v2; the product keeps them
	}
}

// createGroup creates a group and registers its deletion, checking that
// Delete leaves no directory behind in any hierarchy.
func createGroup(t testing.TB, m *Manager, l Limits) *Group {
	t.Helper()
	g, err := m.Create(fmt.Sprintf("test-%d-%d", os.Getpid(), time.Now().UnixNano()), l)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	dirs := append([]string(nil), g.dirs...)
	t.Cleanup(func() {
		if err := g.Delete(); err != nil {
			t.Errorf("Delete: %v", err)
		}
		for _, d := range dirs {
			if exists(d) {
				t.Errorf("Delete left %s behind", d)
			}
		}
	})
	return g
}

// gated is a child process held at a `read` until released, so that it is
// in the group before it runs the code under test.
type gated struct {
	cmd  *exec.Cmd
	gate io.WriteCloser
	done chan error
}

// startInGroup starts argv in g: through CLONE_INTO_CGROUP on v2 when
// intoFD is set, otherwise by AddProc while the child waits at its gate.
func startInGroup(t testing.TB, g *Group, intoFD bool, newPIDNS bool, argv ...string) *gated {
	t.Helper()
	cmd := exec.Command("/bin/sh", append([]string{"-c", `read _ && exec "$@"`, "sh"}, argv...)...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	gate, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	attr := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if newPIDNS {
		// The orphans of a fork bomb then die and are reaped with the
		// namespace's init instead of piling up on the host's pid 1.
		attr.Cloneflags = syscall.CLONE_NEWPID
	}
	if intoFD {
		fd, ok := g.CgroupFD()
		if !ok {
			t.Fatal("CgroupFD not available")
		}
		attr.UseCgroupFD, attr.CgroupFD = true, fd
	}
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %v: %v", argv, err)
	}
	p := &gated{cmd: cmd, gate: gate, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
	if !intoFD {
		if err := g.AddProc(cmd.Process.Pid); err != nil {
			t.Fatalf("AddProc: %v", err)
		}
	}
	return p
}

func (p *gated) release(t testing.TB) {
	t.Helper()
	if _, err := p.gate.Write([]byte("go\n")); err != nil {
		t.Fatalf("release child: %v", err)
	}
	p.gate.Close()
}

// wait returns the child's exit error, failing the test after timeout.
func (p *gated) wait(t testing.TB, timeout time.Duration) error {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err // for the cleanup
		return err
	case <-time.After(timeout):
		t.Fatalf("child %d still running after %v", p.cmd.Process.Pid, timeout)
		return nil
	}
}

func killedBySIGKILL(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

func readTrim(t testing.TB, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read back: %v", err)
	}
	return strings.TrimSpace(string(data))
}

// inGroup reports whether /proc/pid/cgroup places pid in g in every hierarchy.
func inGroup(t testing.TB, pid int, g *Group) bool {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	want := len(g.dirs)
	got := 0
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasSuffix(line, "/"+g.name) {
			got++
		}
	}
	return got == want
}

// onLockedThread runs fn on an OS thread that setup may change (fsuid,
// mount namespace). The thread is never unlocked, so when the goroutine
// ends the Go runtime throws it away instead of reusing it.
func onLockedThread(t *testing.T, setup func() error, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		if err := setup(); err != nil {
			t.Errorf("thread setup: %v", err)
			return
		}
		fn()
	}()
	<-done
}

func dirsOf(m *Manager, name string) []string {
	var out []string
	for _, h := range m.hiers {
		if h.err == nil {
			out = append(out, filepath.Join(h.parent, name))
		}
	}
	return out
}
