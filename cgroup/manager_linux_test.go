package cgroup

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestDefaultParentIsOwnCgroup checks that with no Parent, groups go right
// below the cgroup this process runs in, per hierarchy.
func TestDefaultParentIsOwnCgroup(t *testing.T) {
	requireRoot(t)
	hostMode(t)
	m, err := NewManager(Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	l, err := detectHost()
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range m.hiers {
		if h.err != nil {
			continue
		}
		own := l.self.unified
		if m.Mode() == V1 {
			own = l.self.v1[h.controllers[0]]
		}
		want, err := hostDir(h.mount, own)
		if err != nil {
			t.Fatal(err)
		}
		if m.Mode() == V2 && strings.HasSuffix(want, "/supervisor") {
			want = filepath.Dir(want) // NewManager moved us there; groups go beside it
		}
		if h.parent != want {
			t.Errorf("%v: parent %s, want our own cgroup %s", h.controllers, h.parent, want)
		}
	}
	for _, line := range m.Describe() {
		t.Log(line)
	}
}

// TestStaleGroupsRemoved plays a crashed stockade: a stockade-* group with
// no lock holder and a live process inside, and (on v1) a leftover in one
// hierarchy only. A new manager must kill and remove both, and must leave
// alone a live group of another manager and a cgroup without our prefix.
func TestStaleGroupsRemoved(t *testing.T) {
	m := isolatedManager(t, "")
	live := createGroup(t, m, Limits{PidsMax: 8})

	stale := fmt.Sprintf("%sstale-%d", groupPrefix, os.Getpid())
	staleDirs := dirsOf(m, stale)
	keep := filepath.Join(m.primary().parent, fmt.Sprintf("stockadetest-keep-%d", os.Getpid()))
	mkdirs := append(append([]string(nil), staleDirs...), keep)
	var orphan string
	if m.Mode() == V1 && len(m.hiers) > 1 {
		// A crash between Create's first and second mkdir leaves this.
		orphan = filepath.Join(m.hiers[len(m.hiers)-1].parent, fmt.Sprintf("%sorphan-%d", groupPrefix, os.Getpid()))
		mkdirs = append(mkdirs, orphan)
	}
	for _, d := range mkdirs {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, d := range mkdirs {
			if err := unix.Rmdir(d); err != nil && err != unix.ENOENT {
				t.Errorf("cleanup %s: %v", d, err)
			}
		}
	})
	crashed := &Group{mode: m.Mode(), name: stale, dirs: staleDirs, lockFD: -1, pathFD: -1}
	p := startInGroup(t, crashed, false, false, "/bin/sleep", "60")
	p.release(t)

	var mu sync.Mutex
	var logs []string
	_, err := NewManager(Options{subdir: testSubdir(t), Logf: func(f string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		logs = append(logs, fmt.Sprintf(f, a...))
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range staleDirs {
		if exists(d) {
			t.Errorf("stale %s not removed", d)
		}
	}
	if err := p.wait(t, 5*time.Second); !killedBySIGKILL(err) {
		t.Errorf("process in the stale group ended with %v, want SIGKILL", err)
	}
	if orphan != "" && exists(orphan) {
		t.Errorf("orphan %s not removed", orphan)
	}
	if !exists(keep) {
		t.Errorf("%s (not stockade-*) was removed", keep)
	}
	for _, d := range live.dirs {
		if !exists(d) {
			t.Errorf("live group dir %s was removed", d)
		}
	}
	q := startInGroup(t, live, false, false, "/bin/sleep", "60")
	if !inGroup(t, q.cmd.Process.Pid, live) {
		t.Error("the live group no longer takes processes")
	}
	joined := strings.Join(logs, "\n")
	if !strings.Contains(joined, "removed stale group "+stale) || !strings.Contains(joined, "killing its 1 processes") {
		t.Errorf("no notice about the stale group in logs:\n%s", joined)
	}
}

// TestUnwritableParent runs NewManager as a thread whose filesystem uid is
// not root, so the parent directories (root's, mode 0755) are not writable
// for it, and checks the error says which directory and why.
func TestUnwritableParent(t *testing.T) {
	m := isolatedManager(t, "") // creates the test parents as root
	var err error
	onLockedThread(t, func() error { return unix.Setfsuid(65534) }, func() {
		_, err = NewManager(Options{subdir: testSubdir(t)})
	})
	if err == nil {
		t.Fatal("NewManager succeeded on an unwritable parent")
	}
	t.Log(err)
	p := m.primary().parent
	want := fmt.Sprintf("%s is not writable: permission denied", p)
	if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "cgroup "+string(m.Mode())) {
		t.Errorf("error %q does not contain %q and the mode", err, want)
	}
	if names, _ := staleCandidates(p); len(names) > 0 {
		t.Errorf("left behind: %v", names)
	}
}

// TestMissingParent names a --cgroup-parent that does not exist.
func TestMissingParent(t *testing.T) {
	requireRoot(t)
	hostMode(t)
	parent := fmt.Sprintf("stockadetest-missing-%d", os.Getpid())
	_, err := NewManager(Options{Parent: parent})
	if err == nil {
		t.Fatal("NewManager succeeded with a missing parent")
	}
	if !strings.Contains(err.Error(), parent) || !strings.Contains(err.Error(), "no such file or directory") {
		t.Errorf("error does not name the parent and the reason: %v", err)
	}
	if _, err := NewManager(Options{Parent: "../../etc"}); err == nil || !strings.Contains(err.Error(), `".."`) {
		t.Errorf("a parent with .. was not refused clearly: %v", err)
	}
}

// TestReadOnlyCgroupfs remounts the cgroup mounts read-only in a private
// mount namespace of one thread (as a container without a writable
// cgroupfs has them) and checks NewManager says so.
func TestReadOnlyCgroupfs(t *testing.T) {
	m := isolatedManager(t, "")
	var err error
	setup := func() error {
		before, err := os.Readlink("/proc/thread-self/ns/mnt")
		if err != nil {
			return err
		}
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			return fmt.Errorf("unshare: %w", err)
		}
		// Refuse to go on unless this thread is really in a new
		// namespace: the remounts below must never reach the host.
		after, _ := os.Readlink("/proc/thread-self/ns/mnt")
		if after == "" || after == before {
			return fmt.Errorf("not in a private mount namespace (%q before, %q after)", before, after)
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			return fmt.Errorf("make / private: %w", err)
		}
		for _, h := range m.hiers {
			if err := unix.Mount("", h.mount.mountPoint, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
				return fmt.Errorf("remount %s read-only: %w", h.mount.mountPoint, err)
			}
		}
		return nil
	}
	onLockedThread(t, setup, func() {
		_, err = NewManager(Options{subdir: testSubdir(t)})
	})
	if err == nil {
		t.Fatal("NewManager succeeded on a read-only cgroupfs")
	}
	t.Log(err)
	if !strings.Contains(err.Error(), "read-only") || !strings.Contains(err.Error(), m.hiers[0].mount.mountPoint) {
		t.Errorf("error does not say which mount is read-only: %v", err)
	}
	// The host's view is untouched.
	g := createGroup(t, m, Limits{PidsMax: 4})
	if got := readTrim(t, filepath.Join(g.pidsDir, "pids.max")); got != "4" {
		t.Errorf("after the test, pids.max = %q", got)
	}
}

// TestDescribe checks the doctor lines name the mode and every controller.
func TestDescribe(t *testing.T) {
	m := isolatedManager(t, "")
	lines := m.Describe()
	text := strings.Join(lines, "\n")
	t.Log("\n" + text)
	if !strings.HasPrefix(lines[0], "cgroup: "+string(m.Mode())) {
		t.Errorf("first line %q does not give the mode", lines[0])
	}
	for _, c := range limitControllers {
		if !strings.Contains(text, "cgroup "+c+": usable, groups under /") {
			t.Errorf("no usable line for %s", c)
		}
	}
	if !strings.Contains(text, "cgroup kill:") || !strings.Contains(text, "cgroup swap:") {
		t.Errorf("no kill or swap line")
	}
}

// TestHelperProcess is not a test: other tests run the test binary with it
// to get a process whose cgroup they control.
func TestHelperProcess(t *testing.T) {
	switch os.Getenv("STOCKADE_CGROUP_HELPER") {
	case "":
		t.Skip("helper process only")
	case "leaf":
		helperLeaf()
	}
}
