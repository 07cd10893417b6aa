package cgroup

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/testenv"
	"golang.org/x/sys/unix"
)

// TestV1HasNoCgroupFD: on v1 the jail must fall back to AddProc.
func TestV1HasNoCgroupFD(t *testing.T) {
	m := isolatedManager(t, V1)
	g := createGroup(t, m, Limits{})
	if fd, ok := g.CgroupFD(); ok || fd != -1 {
		t.Errorf("CgroupFD on v1 = %d, %v; want -1, false", fd, ok)
	}
	if g.freezerDir == "" && m.usable("freezer") {
		t.Error("freezer hierarchy usable but the group has no freezer cgroup")
	}
}

// TestV2CloneIntoCgroup starts a child straight into the group with
// CLONE_INTO_CGROUP and checks it is there before it has run anything.
func TestV2CloneIntoCgroup(t *testing.T) {
	m := isolatedManager(t, V2)
	g := createGroup(t, m, Limits{MemoryMax: 64 << 20, PidsMax: 8})
	p := startInGroup(t, g, true, false, "/bin/sleep", "60")
	// Still held at the gate: placement happened at clone time.
	if !inGroup(t, p.cmd.Process.Pid, g) {
		t.Fatalf("pid %d not in %s right after clone", p.cmd.Process.Pid, g.name)
	}
	p.release(t)
	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t, 5*time.Second); !killedBySIGKILL(err) {
		t.Errorf("child ended with %v, want SIGKILL", err)
	}
	data := readTrim(t, filepath.Join(g.dirs[0], "cgroup.events"))
	if !strings.Contains(data, "populated 0") {
		t.Errorf("cgroup.events after Kill: %q", data)
	}
}

// TestV2NoInternalProcesses plays a container whose cgroup-namespace root
// holds stockade: the helper process runs alone in a fresh cgroup without
// controllers for children, so NewManager has to move it into
// <own>/supervisor before it can enable them, and must then limit.
func TestV2NoInternalProcesses(t *testing.T) {
	m := isolatedManager(t, V2)
	t.Run("stockade alone moves to a leaf", func(t *testing.T) {
		out, err := runHelperIn(t, m, false)
		if err != nil {
			t.Fatalf("helper: %v\n%s", err, out)
		}
		for _, want := range []string{"moved stockade", "/supervisor", "memory.max=67108864", "pids.max=8", "deleted", "second manager same parent"} {
			if !strings.Contains(out, want) {
				t.Errorf("helper output lacks %q:\n%s", want, out)
			}
		}
	})
	t.Run("another process in the cgroup is a clear error", func(t *testing.T) {
		out, err := runHelperIn(t, m, true)
		if err == nil {
			t.Fatalf("helper succeeded although its cgroup holds another process:\n%s", out)
		}
		if !strings.Contains(out, "processes other than stockade") {
			t.Errorf("error is not explained:\n%s", out)
		}
	})
}

// freshCgroup makes dir, a cgroup of one test's own, and returns a
// descriptor of it for starting a process inside (UseCgroupFD). After the
// test it closes that and removes the children named (those the test's
// processes may have made) and dir.
func freshCgroup(t *testing.T, dir string, children ...string) int {
	t.Helper()
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range children {
			if err := unix.Rmdir(filepath.Join(dir, c)); err != nil && err != unix.ENOENT {
				t.Errorf("cleanup %s: %v", filepath.Join(dir, c), err)
			}
		}
		if err := unix.Rmdir(dir); err != nil && err != unix.ENOENT {
			t.Errorf("cleanup %s: %v", dir, err)
		}
		// A stockade started in dir locked it as its parent; the
		// product keeps lock files, a test's own parents' go with them.
		os.Remove(parentLockPath(dir))
	})
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// runHelperIn makes a fresh cgroup below m's parent, optionally puts a
// sleep there first, and runs the test binary's helper inside it.
func runHelperIn(t *testing.T, m *Manager, withSibling bool) (string, error) {
	t.Helper()
	dir := filepath.Join(m.primary().parent, fmt.Sprintf("stockadetest-ns-%d-%v", os.Getpid(), withSibling))
	// The helper moved into supervisor and exited; the sibling is killed below.
	fd := freshCgroup(t, dir, "supervisor")
	if withSibling {
		sib := exec.Command("/bin/sleep", "60")
		sib.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd, Pdeathsig: syscall.SIGKILL}
		if err := sib.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sib.Process.Kill(); sib.Wait() })
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.v")
	cmd.Env = append(os.Environ(), "STOCKADE_CGROUP_HELPER=leaf")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// helperLeaf is the helper's body: a stockade in a cgroup that holds it.
func helperLeaf() {
	fail := func(format string, a ...any) {
		fmt.Printf("helper: "+format+"\n", a...)
		os.Exit(1)
	}
	m, err := NewManager(Options{Logf: func(f string, a ...any) { fmt.Printf("notice: "+f+"\n", a...) }})
	if err != nil {
		fail("NewManager: %v", err)
	}
	self, _ := os.ReadFile("/proc/self/cgroup")
	fmt.Printf("now in %s", self)
	g, err := m.Create(fmt.Sprintf("leaf-%d", os.Getpid()), Limits{MemoryMax: 64 << 20, PidsMax: 8})
	if err != nil {
		fail("Create: %v", err)
	}
	for _, f := range []string{"memory.max", "pids.max"} {
		data, err := os.ReadFile(filepath.Join(g.dirs[0], f))
		if err != nil {
			fail("%v", err)
		}
		fmt.Printf("%s=%s\n", f, strings.TrimSpace(string(data)))
	}
	if err := g.Delete(); err != nil {
		fail("Delete: %v", err)
	}
	fmt.Println("deleted")
	// A long-lived stockade makes a manager per run; it must not nest.
	m2, err := NewManager(Options{})
	if err != nil {
		fail("second NewManager: %v", err)
	}
	self2, _ := os.ReadFile("/proc/self/cgroup")
	if m2.primary().parent != m.primary().parent || strings.Count(string(self2), "supervisor") != 1 {
		fail("second NewManager: parent %s (first %s), now in %s", m2.primary().parent, m.primary().parent, self2)
	}
	fmt.Println("second manager same parent")
	// Close: the first manager's finds the second still holding the
	// parent and must change nothing; the last one puts the parent back
	// as it was, so that its owner (a systemd unit) can place a process
	// there again.
	parent := m.primary().parent
	if err := m.Close(); err != nil {
		fail("Close: %v", err)
	}
	if _, err := Restore(); err != nil {
		fail("Restore: %v", err)
	}
	if !exists(filepath.Join(parent, leafName)) || !strings.Contains(readSelf(), "/"+leafName) {
		fail("Restore undid the leaf while a second manager held the parent")
	}
	if err := m2.Close(); err != nil {
		fail("second Close: %v", err)
	}
	if _, err := Restore(); err != nil {
		fail("Restore: %v", err)
	}
	ctl, _ := os.ReadFile(filepath.Join(parent, "cgroup.subtree_control"))
	if strings.TrimSpace(string(ctl)) != "" || exists(filepath.Join(parent, leafName)) || strings.Contains(readSelf(), leafName) {
		fail("after the last Close: subtree_control %q, leaf there %v, in %s", ctl, exists(filepath.Join(parent, leafName)), readSelf())
	}
	// The unit's next process must be placeable in the parent.
	fmt.Println("closed: parent as found")
	os.Exit(0)
}

func readSelf() string {
	b, _ := os.ReadFile("/proc/self/cgroup")
	return string(b)
}

// TestV2CloseUndoesLeaf: what NewManager does to a cgroup that holds
// stockade (move into <own>/supervisor), Close undoes when stockade is the
// parent's last user, and leaves alone while anything else may rely on it:
// another stockade's lock, a process in the leaf, another child group. On
// this hybrid host the cgroup2 mount has no controllers, so the helper
// makes the move itself; the VM runs the same with controllers
// (TestV2NoInternalProcesses).
func TestV2CloseUndoesLeaf(t *testing.T) {
	testenv.NeedRoot(t, "creates cgroups")
	l, err := detectHost()
	if err != nil || l.v2 == nil || l.self.unified == "" {
		t.Skip("needs a cgroup2 mount")
	}
	own, err := hostDir(*l.v2, l.self.unified)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, want string }{
		{"alone", "undone: moved stockade"},
		{"locked", "kept while locked; undone after the other Close"},
		{"process in leaf", "kept: a process in the leaf"},
		{"other child", "kept: another child group"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(own, fmt.Sprintf("stockadetest-undo-%d-%s", os.Getpid(), strings.ReplaceAll(tc.name, " ", "_")))
			fd := freshCgroup(t, dir, "other", leafName)
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.v")
			cmd.Env = append(os.Environ(), "STOCKADE_CGROUP_HELPER=undo", "STOCKADE_UNDO_CASE="+tc.name)
			cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd, Pdeathsig: syscall.SIGKILL}
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), tc.want) {
				t.Fatalf("helper (%v) lacks %q:\n%s", err, tc.want, out)
			}
			// Seen from outside, after the helper is gone.
			leafThere := exists(filepath.Join(dir, leafName))
			if wantLeaf := tc.name != "alone" && tc.name != "locked"; leafThere != wantLeaf {
				t.Errorf("leaf %s there: %v, want %v", filepath.Join(dir, leafName), leafThere, wantLeaf)
			}
		})
	}
}

// helperUndo is a stockade started in a cgroup of its own (a unit's).
func helperUndo() {
	fail := func(format string, a ...any) {
		fmt.Printf("helper: "+format+"\n", a...)
		os.Exit(1)
	}
	l, err := detectHost()
	if err != nil {
		fail("%v", err)
	}
	l.mode = V2 // on a hybrid host, the cgroup2 mount's mechanics
	newMgr := func() *Manager {
		m := setup(l, Options{})
		if m.hiers[0].err != nil || m.parentFD < 0 {
			fail("setup: %v (lock fd %d)", m.hiers[0].err, m.parentFD)
		}
		return m
	}
	m := newMgr()
	parent := m.primary().parent
	leaf := filepath.Join(parent, leafName)
	inLeaf := func() bool {
		self, err := selfV2Dir(*l.v2)
		return err == nil && self == leaf && exists(leaf)
	}
	if !inLeaf() {
		// What resolveV2 does when the parent holds stockade and a
		// controller must be enabled; on a hybrid host's cgroup2 mount
		// (and below a leaf without controllers in the VM) there is none
		// to enable.
		if err := m.moveSelfToLeaf(parent); err != nil {
			fail("move: %v", err)
		}
	}
	if !inLeaf() {
		fail("not in %s after the move: %s", leaf, readSelf())
	}
	restore := func(m *Manager) error {
		if err := m.Close(); err != nil {
			return err
		}
		_, err := restoreOn(*l.v2)
		return err
	}
	switch os.Getenv("STOCKADE_UNDO_CASE") {
	case "alone":
		if err := restore(m); err != nil {
			fail("Close: %v", err)
		}
		if inLeaf() {
			fail("Close left stockade in %s", leaf)
		}
		if pids, _ := readPids(parent); len(pids) != 1 || pids[0] != os.Getpid() {
			fail("parent holds %v, want only %d", pids, os.Getpid())
		}
		fmt.Println("undone: moved stockade back")
	case "locked":
		other := newMgr() // another stockade's manager on the same parent
		if err := restore(m); err != nil {
			fail("Close: %v", err)
		}
		if !inLeaf() {
			fail("Close undid the leaf while another manager held the parent")
		}
		if err := restore(other); err != nil {
			fail("other Close: %v", err)
		}
		if inLeaf() {
			fail("the last Close left stockade in %s", leaf)
		}
		fmt.Println("kept while locked; undone after the other Close")
	case "process in leaf":
		sleep := exec.Command("/bin/sleep", "60") // starts in our cgroup, the leaf
		if err := sleep.Start(); err != nil {
			fail("%v", err)
		}
		err := restore(m)
		still := inLeaf()
		sleep.Process.Kill()
		sleep.Wait()
		if err != nil || !still {
			fail("Close with a process in the leaf: %v, still in leaf %v", err, still)
		}
		fmt.Println("kept: a process in the leaf")
	case "other child":
		if err := os.Mkdir(filepath.Join(parent, "other"), 0o755); err != nil {
			fail("%v", err)
		}
		if err := restore(m); err != nil || !inLeaf() {
			fail("Close with another child group: %v, still in leaf %v", err, inLeaf())
		}
		fmt.Println("kept: another child group")
	}
	os.Exit(0)
}

// TestV2MechanicsOnHybridUnified runs the v2 code on a hybrid host's
// cgroup2 mount, which has none of the limit controllers: everything that
// needs no controller is real here (CLONE_INTO_CGROUP, cgroup.kill,
// cgroup.events, cpu.stat, and removing a stale group), and a
// requested limit must fail closed because its controller is not delegated.
func TestV2MechanicsOnHybridUnified(t *testing.T) {
	testenv.NeedRoot(t, "creates cgroups")
	l, err := detectHost()
	if err != nil || l.mode != V1 || l.v2 == nil || l.self.unified == "" {
		t.Skip("needs a hybrid host (v1 controllers beside a cgroup2 mount)")
	}
	l.mode = V2
	m := setup(l, Options{Logf: t.Logf, subdir: testSubdir(t)})
	t.Cleanup(func() { removeTestParents(t, m) })
	if m.primary() == nil {
		t.Skipf("cgroup2 mount not usable: %v", m.hiers[0].err)
	}
	if m.ctlErr["memory"] != nil {
		_, err := m.Create("nomem", Limits{MemoryMax: 64 << 20})
		if err == nil || !strings.Contains(err.Error(), "memory limit requested") || !strings.Contains(err.Error(), "not delegated") {
			t.Errorf("Create with an undelegated memory controller: %v", err)
		}
		if exists(filepath.Join(m.primary().parent, groupPrefix+"nomem")) {
			t.Error("refused Create left its directory")
		}
	}

	g := createGroup(t, m, Limits{})
	// Spin on CPU time, not wall time: on a loaded machine a wall-clock
	// spin gets only a share of a core.
	spinThenFork := "import os, time\nt = time.process_time()\nwhile time.process_time() - t < 0.2: pass\nos.fork()\ntime.sleep(60)\n"
	p := startInGroup(t, g, true, true, python, "-c", spinThenFork)
	if !inGroup(t, p.cmd.Process.Pid, g) {
		t.Fatalf("pid %d not in %s right after CLONE_INTO_CGROUP", p.cmd.Process.Pid, g.name)
	}
	p.release(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids, err := readPids(g.dirs[0])
		if err != nil {
			t.Fatal(err)
		}
		if len(pids) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the child never forked: %v", pids)
		}
		time.Sleep(10 * time.Millisecond)
	}
	used, err := g.CPUUsage()
	if err != nil {
		t.Fatal(err)
	}
	st, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if used < 150*time.Millisecond || st.CPUUsage < used || st.UserCPU == 0 {
		t.Errorf("after a 200ms spin: CPUUsage %v, Stats %+v", used, st)
	}
	if err := g.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if data := readTrim(t, filepath.Join(g.dirs[0], "cgroup.events")); !strings.Contains(data, "populated 0") {
		t.Errorf("cgroup.events right after Kill returned: %q", data)
	}
	if err := p.wait(t, 5*time.Second); !killedBySIGKILL(err) {
		t.Errorf("child ended with %v, want SIGKILL", err)
	}

	// A crashed stockade's v2 group, with a process in it.
	stale := filepath.Join(m.primary().parent, fmt.Sprintf("%sstale-%d", groupPrefix, os.Getpid()))
	if err := os.Mkdir(stale, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Rmdir(stale); err != nil && err != unix.ENOENT {
			t.Errorf("cleanup %s: %v", stale, err)
		}
	})
	crashed := &Group{mode: V2, name: filepath.Base(stale), dirs: []string{stale}, pathFD: -1}
	q := startInGroup(t, crashed, false, false, "/bin/sleep", "60")
	q.release(t)
	if _, err := RemoveStale([]string{stale}); err != nil {
		t.Errorf("RemoveStale: %v", err)
	}
	if exists(stale) {
		t.Errorf("stale v2 group %s not removed", stale)
	}
	if err := q.wait(t, 5*time.Second); !killedBySIGKILL(err) {
		t.Errorf("process in the stale group ended with %v, want SIGKILL", err)
	}
	if !exists(g.dirs[0]) {
		t.Errorf("the sweep removed the live group %s", g.dirs[0])
	}
}
