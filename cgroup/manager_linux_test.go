package cgroup

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/testenv"
	"golang.org/x/sys/unix"
)

// TestDefaultParentIsOwnCgroup checks that with no Parent, groups go right
// below the cgroup this process runs in, per hierarchy.
func TestDefaultParentIsOwnCgroup(t *testing.T) {
	testenv.NeedRoot(t, "creates cgroups")
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

// TestRemoveStaleKillsAndRemoves plays a crashed stockade's group: present
// in every hierarchy with a live process inside, or (a crash between
// Create's mkdirs) in some only. RemoveStale must kill and remove it, leave
// a live group of the same parent alone, and refuse paths that are not
// stockade groups on a cgroupfs. A Manager never removes anything by
// itself: the owner's proof of death is the caller's (runlock).
func TestRemoveStaleKillsAndRemoves(t *testing.T) {
	m := isolatedManager(t, "")
	live := createGroup(t, m, Limits{PidsMax: 8})

	stale := fmt.Sprintf("stale-%d", os.Getpid())
	staleDirs := m.GroupDirs(stale)
	keep := filepath.Join(m.primary().parent, fmt.Sprintf("stockadetest-keep-%d", os.Getpid()))
	mkdirs := append(append([]string(nil), staleDirs...), keep)
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
	crashed := &Group{mode: m.Mode(), name: groupPrefix + stale, dirs: staleDirs, pathFD: -1}
	for _, d := range staleDirs {
		if exists(filepath.Join(d, "freezer.state")) {
			crashed.freezerDir = d
		}
	}
	p := startInGroup(t, crashed, false, false, "/bin/sleep", "60")
	p.release(t)

	notCgroup := filepath.Join(t.TempDir(), groupPrefix+"x")
	if err := os.Mkdir(notCgroup, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{keep, notCgroup, "relative/" + groupPrefix + "x", live.dirs[0] + "/../" + filepath.Base(keep)} {
		if _, err := RemoveStale([]string{bad}); err == nil {
			t.Errorf("RemoveStale(%s) accepted a path that is not a stockade group", bad)
		}
	}
	if !exists(keep) || !exists(notCgroup) {
		t.Fatalf("%s or %s (not stockade groups) was removed", keep, notCgroup)
	}
	n, err := RemoveStale(staleDirs)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("RemoveStale killed %d processes, want 1", n)
	}
	for _, d := range staleDirs {
		if exists(d) {
			t.Errorf("stale %s not removed", d)
		}
	}
	if err := p.wait(t, 5*time.Second); !killedBySIGKILL(err) {
		t.Errorf("process in the stale group ended with %v, want SIGKILL", err)
	}
	if n, err := RemoveStale(staleDirs); n != 0 || err != nil {
		t.Errorf("RemoveStale of what is gone: %d, %v", n, err)
	}
	if m.Mode() == V1 && len(m.hiers) > 1 {
		// A crash between Create's first and second mkdir leaves a group
		// in some hierarchies only.
		orphan := m.GroupDirs(fmt.Sprintf("orphan-%d", os.Getpid()))
		last := orphan[len(orphan)-1]
		if err := os.Mkdir(last, 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := RemoveStale(orphan); err != nil || exists(last) {
			t.Errorf("orphan %s: %v, still there: %v", last, err, exists(last))
		}
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
	if names, _ := stockadeGroups(p); len(names) > 0 {
		t.Errorf("left behind: %v", names)
	}
}

// TestMissingParent names a --cgroup-parent that does not exist.
func TestMissingParent(t *testing.T) {
	testenv.NeedRoot(t, "creates cgroups")
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
	case "undo":
		helperUndo()
	}
}
