package jail

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/clitest"
	"github.com/stockade/stockade/internal/testenv"
	"github.com/stockade/stockade/jail/internal/jailinit"
)

// hostUnixServer listens on a path-named unix socket (mode 0777, reachable
// by any uid) and counts the connections it accepts.
func hostUnixServer(t *testing.T, path string) *atomic.Int64 {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	if err := os.Chmod(path, 0o777); err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Write([]byte("host-service\n"))
			c.Close()
		}
	}()
	return &n
}

// lateUnixServer starts hostUnixServer at path after delay, while the jail
// runs, and returns how many connections it has accepted (0 before it
// starts).
func lateUnixServer(t *testing.T, path string, delay time.Duration) func() int64 {
	var n atomic.Pointer[atomic.Int64]
	go func() {
		time.Sleep(delay)
		n.Store(hostUnixServer(t, path))
	}()
	return func() int64 {
		if c := n.Load(); c != nil {
			return c.Load()
		}
		return 0
	}
}

// hostFIFO makes a FIFO at path that any uid may write, and holds a reader
// open on its host side (closed after the test), so that a write from the
// jail would succeed.
func hostFIFO(t *testing.T, path string) *os.File {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o666); err != nil {
		t.Fatal(err)
	}
	os.Chmod(path, 0o666)
	fr, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fr.Close() })
	return fr
}

// assertDoorsHeld checks a run of connectAll (door says how the host
// directory reached the jail): the jail reached no host socket or FIFO,
// the host services accepted no connection, the host FIFO's reader fr got
// nothing, and the jail saw every one of names, without which the attack
// proves nothing.
func assertDoorsHeld(t *testing.T, r *Result, door string, accepted int64, fr *os.File, names ...string) {
	t.Helper()
	if strings.Contains(r.Stdout, "CONNECTED") || strings.Contains(r.Stdout, "FIFO WRITTEN") {
		t.Errorf("the jail reached a host socket or FIFO %s:\n%s", door, r.Stdout)
	}
	if accepted > 0 {
		t.Errorf("host services accepted connections from the jail")
	}
	buf := make([]byte, 64)
	if n, _ := fr.Read(buf); n > 0 {
		t.Errorf("the host FIFO received %q from the jail", buf[:n])
	}
	for _, name := range names {
		if !strings.Contains(r.Stdout, name) {
			t.Errorf("the jail did not see %s:\n%s%s", name, r.Stdout, r.Stderr)
		}
	}
}

// connectAll tries every socket and FIFO below a directory in the jail,
// those there at the start and one the host creates while the jail waits.
const connectAll = `
import os, socket, sys, time
time.sleep(float(sys.argv[2]))
for dirpath, dirs, files in os.walk(sys.argv[1]):
    for f in files:
        p = os.path.join(dirpath, f)
        try:
            s = socket.socket(socket.AF_UNIX)
            s.connect(p)
            print("CONNECTED", p, s.recv(64))
        except OSError as e:
            print("refused", p, e.errno)
        try:
            fd = os.open(p, os.O_WRONLY | os.O_NONBLOCK)
            os.write(fd, b"from the jail\n")
            print("FIFO WRITTEN", p)
        except OSError as e:
            print("fifo", p, e.errno)
`

// TestAttackUnixSocketBelowReadOnlyBind: a host service's socket in a
// directory bound with --ro, at any depth, present at the start or created
// while the jail runs, must not answer the jail; nor may a host FIFO there
// be written.
func TestAttackUnixSocketBelowReadOnlyBind(t *testing.T) {
	testenv.NeedJail(t)
	dir := reachableTempDir(t)
	sub := filepath.Join(dir, "a", "b")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(dir, "a"), 0o755)
	early := hostUnixServer(t, filepath.Join(dir, "service.sock"))
	deep := hostUnixServer(t, filepath.Join(sub, "deep.sock"))
	fr := hostFIFO(t, filepath.Join(dir, "fifo"))

	s := doorSpec("python3", "-c", connectAll, "/data", "1.5")
	s.ReadOnly = []Bind{{Source: dir, Dest: "/data"}}
	late := lateUnixServer(t, filepath.Join(sub, "late.sock"), 500*time.Millisecond)
	r := mustRun(t, s)
	time.Sleep(100 * time.Millisecond)
	assertDoorsHeld(t, r, "through --ro", early.Load()+deep.Load()+late(), fr, "service.sock", "deep.sock", "late.sock", "fifo")
}

// TestReadOnlyBindShowsNoHostPath: mountinfo in the jail names neither the
// host directory of a --ro bind nor that of a bound file.
func TestReadOnlyBindShowsNoHostPath(t *testing.T) {
	testenv.NeedJail(t)
	dir := reachableTempDir(t)
	os.WriteFile(filepath.Join(dir, "task.py"), []byte("print('task ran')\n"), 0o644)
	s := doorSpec("sh", "-c", "python3 /code/task.py; cat /data/task.py; cat /proc/self/mountinfo")
	s.ReadOnly = []Bind{{Source: dir, Dest: "/data"}, {Source: filepath.Join(dir, "task.py"), Dest: "/code/task.py"}}
	r := mustRun(t, s)
	if !strings.HasPrefix(r.Stdout, "task ran\nprint('task ran')\n") {
		t.Fatalf("binds do not work: %+v", r)
	}
	if strings.Contains(r.Stdout, dir) {
		t.Errorf("mountinfo shows the host path %s:\n%s", dir, r.Stdout)
	}
}

// TestAttackSyncfsOnWork: syncfs on /work, a host directory, would flush
// the host's filesystem (what sync is refused for).
func TestAttackSyncfsOnWork(t *testing.T) {
	testenv.NeedJail(t)
	r := mustRun(t, doorSpec("python3", "-c", `
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open("/work", os.O_RDONLY)
rc = libc.syscall(306, fd)
print(rc, ctypes.get_errno())
`))
	if r.Stdout != "-1 1\n" {
		t.Errorf("syncfs on /work: %q, want -1 EPERM", r.Stdout)
	}
	found := false
	for _, b := range r.BlockedSyscalls {
		found = found || b.Name == "syncfs"
	}
	if !found {
		t.Errorf("syncfs not reported blocked: %+v", r.BlockedSyscalls)
	}
}

// doorSpec is spec without a cgroup: none of these doors depends on one,
// and the tests should not depend on the cgroup hierarchy either.
func doorSpec(args ...string) Spec {
	s := spec(args...)
	s.Host.NoCgroup = true
	return s
}

func runErr(t *testing.T, s Spec) error {
	t.Helper()
	res, err := runJail(t, s, Streams{})
	if err != nil && res.ExitCode != ExitJailError {
		t.Errorf("refusal exits %d, want %d", res.ExitCode, ExitJailError)
	}
	return err
}

func TestSourcePolicy(t *testing.T) {
	p := sourcePolicy{homes: []string{"/root", "/home", "/var/lib/postgresql", "/usr/games"},
		runtime: []string{"/run", "/var/run", "/run/user/1000"}, uidMin: 1000, names: map[uint32]string{101: "postgres"}}
	for _, c := range []struct {
		path string
		ok   bool
	}{
		{"/", false}, {"/var/lib/postgresql", false}, {"/var/lib", false}, {"/var", false},
		{"/home/alice", true}, {"/home", false}, {"/var/lib/postgresql/15/main", true},
		{"/run", false}, {"/run/user", false}, {"/run/dbus", false}, {"/run/systemd", false},
		{"/var/run/x", false}, {"/usr", false}, {"/usr/share/dict", true}, {"/srv/data", true},
	} {
		err := p.checkPath("--ro", c.path)
		if (err == nil) != c.ok {
			t.Errorf("%s: %v, want ok=%v", c.path, err, c.ok)
		}
	}
	for _, c := range []struct {
		uid uint32
		ok  bool
	}{{0, false}, {1, false}, {101, false}, {999, false}, {65534, false}, {1000, true}, {4242, true}, {HostID, true}} {
		err := p.checkOwner("/srv/w", c.uid)
		if (err == nil) != c.ok {
			t.Errorf("owner %d: %v, want ok=%v", c.uid, err, c.ok)
		}
	}
	if err := p.checkOwner("/srv/w", 101); err == nil || !strings.Contains(err.Error(), "postgres (uid 101)") {
		t.Errorf("system account not named: %v", err)
	}
}

// A run with no host path to check never reads the host's policy; a check
// that still reaches the unread (zero) policy must refuse, not allow
// everything its empty lists allow.
func TestUnreadSourcePolicyRefuses(t *testing.T) {
	dir := t.TempDir()
	var p sourcePolicy
	if _, err := p.checkSource("--ro", dir); err == nil {
		t.Errorf("--ro %s passed an unread policy", dir)
	}
	if _, err := p.checkWorkdir(dir); err == nil {
		t.Errorf("--workdir %s passed an unread policy", dir)
	}
	if _, err := hostSourcePolicy().checkSource("--ro", dir); err != nil {
		t.Errorf("--ro %s refused by the host's policy: %v", dir, err)
	}
}

// TestAttackWorkdirIsAnotherUsersHome: as root, --workdir of any home
// directory in /etc/passwd (a user's, so the jail would write her
// .bashrc; a service's, such as /var/lib/postgresql) or of a directory
// holding one is refused, as is --ro of one.
func TestAttackWorkdirIsAnotherUsersHome(t *testing.T) {
	testenv.NeedJail(t)
	pol := hostSourcePolicy()
	tried := 0
	for _, home := range pol.homes {
		for _, dir := range []string{home, filepath.Dir(home)} {
			if _, err := os.Stat(dir); err != nil {
				continue
			}
			tried++
			s := doorSpec("true")
			s.Workdir = dir
			if err := runErr(t, s); err == nil {
				t.Errorf("--workdir %s (home %s) was accepted", dir, home)
			}
			s = doorSpec("true")
			s.ReadOnly = []Bind{{Source: dir, Dest: "/data"}}
			if err := runErr(t, s); err == nil {
				t.Errorf("--ro %s (home %s) was accepted", dir, home)
			}
		}
	}
	if tried < 3 {
		t.Errorf("only %d home directories exist here to try", tried)
	}
}

// TestAttackWorkdirOwnedBySystemAccount: as root the jail acts as the
// owner of --workdir; a system account's directory would let it write as
// that service.
func TestAttackWorkdirOwnedBySystemAccount(t *testing.T) {
	testenv.NeedJail(t)
	testenv.NeedRoot(t, "the owner rule is for root")
	dir := reachableTempDir(t)
	for _, uid := range []int{1, 101, 65534} {
		if err := os.Chown(dir, uid, uid); err != nil {
			t.Fatal(err)
		}
		s := doorSpec("sh", "-c", "echo owned > /work/x")
		s.Workdir = dir
		if err := runErr(t, s); err == nil || !strings.Contains(err.Error(), "system account") {
			t.Errorf("--workdir owned by uid %d: %v", uid, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); err == nil {
		t.Error("the jail wrote into a system account's directory")
	}
}

// TestAttackReadOnlyBindOfRuntimeState: --ro of runtime state (where D-Bus,
// systemd and the user's services keep their sockets) is refused like
// --workdir, and so is the host's root under another name.
func TestAttackReadOnlyBindOfRuntimeState(t *testing.T) {
	testenv.NeedJail(t)
	for _, src := range []string{"/run", "/run/user", "/run/dbus", "/run/systemd", "/var/run", "/var/lib", "/", "/proc/1/root"} {
		if _, err := os.Lstat(src); err != nil {
			continue
		}
		s := doorSpec("ls", "/data")
		s.ReadOnly = []Bind{{Source: src, Dest: "/data"}}
		if err := runErr(t, s); err == nil {
			t.Errorf("--ro %s was accepted", src)
		}
	}
}

// TestNoexecIsNotAnExecBoundary pins what docs/jail.md says: noexec on /work,
// /tmp and --ro stops execve of a file there, not a copy in a memfd.
func TestNoexecIsNotAnExecBoundary(t *testing.T) {
	testenv.NeedJail(t)
	r := mustRun(t, doorSpec("python3", "-c", `
import os, shutil
shutil.copy("/bin/echo", "/tmp/echo")
os.chmod("/tmp/echo", 0o755)
try:
    os.execv("/tmp/echo", ["echo", "noexec failed"])
except PermissionError:
    pass
fd = os.memfd_create("echo")
with open("/bin/echo", "rb") as f:
    os.write(fd, f.read())
os.execv("/proc/self/fd/%d" % fd, ["echo", "ran from a memfd"])
`))
	if r.Stdout != "ran from a memfd\n" {
		t.Errorf("%+v", r)
	}
}

// TestAttackRootfsIsTheHostRoot: --rootfs / would show the jail the
// host's /home, /var/log and the rest.
func TestAttackRootfsIsTheHostRoot(t *testing.T) {
	testenv.NeedJail(t)
	for _, root := range []string{"/", "//", "/proc/self/root", "/home"} {
		s := doorSpec("ls", "/home")
		s.Rootfs = root
		err := runErr(t, s)
		if err == nil {
			t.Errorf("--rootfs %s was accepted", root)
		}
	}
}

// TestAttackStaleRootfsVerdict: a prepared root passes the check once, and
// the verdict is cached; a set-id file added afterwards must not ride on
// that verdict.
func TestAttackStaleRootfsVerdict(t *testing.T) {
	testenv.NeedJail(t)
	dir := clitest.BuiltRootfs(t)
	s := doorSpec("python3", "-c", "print('ok')")
	s.Rootfs = dir
	if r := mustRun(t, s); r.Stdout != "ok\n" {
		t.Fatalf("built root: %+v", r)
	}
	base := RunBase()
	if ents, _ := os.ReadDir(filepath.Join(base, "checked-roots")); len(ents) == 0 {
		t.Error("no verdict was cached for a root that passed")
	}
	planted := filepath.Join(dir, "srv", "stockade-planted-setuid")
	if err := os.WriteFile(planted, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(planted)
	if err := os.Chmod(planted, 0o755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	err := runErr(t, s)
	if err == nil || !strings.Contains(err.Error(), "setuid") {
		t.Errorf("a root with a new setuid file: %v", err)
	}
	os.Remove(planted)
	if r := mustRun(t, s); r.Stdout != "ok\n" {
		t.Fatalf("built root after the fix: %+v", r)
	}
}

// TestAttackProcTellsAboutTheHost: what the jail's /proc says about the
// host where the kernel does not namespace it and stockade can hide it
// cheaply: the boot id (which identifies the host across runs), the kernel
// command line, the load average, and the uptime.
func TestAttackProcTellsAboutTheHost(t *testing.T) {
	testenv.NeedJail(t)
	read := `
import sys
for p in ["/proc/sys/kernel/random/boot_id", "/proc/cmdline", "/proc/loadavg", "/proc/uptime"]:
    print(open(p).read().strip())
`
	a := mustRun(t, doorSpec("python3", "-c", read))
	// The second run is told by this boot's note that init need not probe
	// (timens_linux.go), where the kernel can: its uptime is checked too.
	noted := timeNSKnownUsable()
	b := mustRun(t, doorSpec("python3", "-c", read))
	la, lb := strings.Split(a.Stdout, "\n"), strings.Split(b.Stdout, "\n")
	if len(la) < 4 || len(lb) < 4 {
		t.Fatalf("runs: %+v %+v", a, b)
	}
	host := func(p string) string {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(data))
	}
	if la[0] == host("/proc/sys/kernel/random/boot_id") || la[0] == lb[0] || len(la[0]) != 36 {
		t.Errorf("boot_id: jail %q, next jail %q, host %q: want a fresh id per run", la[0], lb[0], host("/proc/sys/kernel/random/boot_id"))
	}
	if la[1] != "" {
		t.Errorf("the host's kernel command line: %q", la[1])
	}
	if !strings.HasPrefix(la[2], "0.00 0.00 0.00 ") {
		t.Errorf("the host's load average: %q", la[2])
	}
	var up, upNoted, hostUp float64
	fmt.Sscan(la[3], &up)
	fmt.Sscan(lb[3], &upNoted)
	fmt.Sscan(host("/proc/uptime"), &hostUp)
	if !jailinit.TimeNamespaceUsable() {
		t.Logf("no usable time namespace on this kernel: uptime is the host's (%v)", up)
		if noted {
			t.Errorf("this boot's note says a time namespace is usable, and the kernel says not")
		}
	} else {
		if up > 10 || (hostUp > 60 && up > hostUp/2) {
			t.Errorf("uptime %q in the jail, %v on the host: want the jail's own", la[3], hostUp)
		}
		if !noted {
			t.Errorf("no note of a usable time namespace after a probe that found one")
		}
		if upNoted > 10 || (hostUp > 60 && upNoted > hostUp/2) {
			t.Errorf("uptime %q in the jail started with the note, %v on the host: want the jail's own", lb[3], hostUp)
		}
	}
}

// TestAttackUnixSocketInWorkdir: a host service's socket in the directory
// handed over as /work, at any depth, there at the start or created while
// the jail runs, must not answer the jail (the --workdir is an overlay too);
// nor may a host FIFO there be written.
func TestAttackUnixSocketInWorkdir(t *testing.T) {
	testenv.NeedJail(t)
	dir := reachableTempDir(t)
	deep := filepath.Join(dir, "src", "pkg")
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	early := hostUnixServer(t, filepath.Join(deep, "service.sock"))
	fr := hostFIFO(t, filepath.Join(dir, "pipe"))
	if os.Geteuid() == 0 {
		filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, 4242, 4242) })
	}
	late := lateUnixServer(t, filepath.Join(deep, "late.sock"), 500*time.Millisecond)
	s := doorSpec("python3", "-c", connectAll, "/work", "1.5")
	s.Workdir = dir
	r := mustRun(t, s)
	time.Sleep(100 * time.Millisecond)
	assertDoorsHeld(t, r, "in --workdir", early.Load()+late(), fr, "service.sock", "late.sock", "pipe")
}
