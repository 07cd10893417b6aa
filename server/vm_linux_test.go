package server

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/internal/clitest"
	"github.com/stockade/stockade/internal/testenv"
	"github.com/stockade/stockade/vmtier"
	"golang.org/x/sys/unix"
)

// vmServeEnv skips t unless a guest can boot here (root, the binary,
// QEMU, a guest kernel: $STOCKADE_VM_KERNEL or the one vmtest/run
// fetched) and returns the environment a server needs to boot guests.
func vmServeEnv(t *testing.T) []string {
	t.Helper()
	testenv.NeedRoot(t, "boots guests whose VMMs get namespaces and cgroups")
	testenv.NeedBinary(t, "the guest's init is the stockade binary")
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("no qemu-system-x86_64 (apt-get install qemu-system-x86)")
	}
	repo, _ := filepath.Abs("..")
	kernel := os.Getenv(vmtier.KernelEnv)
	if kernel == "" {
		found, _ := filepath.Glob(filepath.Join(repo, "build/vm-cache/kernel/*/vmlinuz"))
		if len(found) == 0 {
			t.Skip("no guest kernel: set " + vmtier.KernelEnv + " or run vmtest/run --fetch-kernel")
		}
		kernel = found[len(found)-1]
	}
	cache := os.Getenv(vmtier.CacheEnv)
	if cache == "" {
		cache = filepath.Join(repo, "build/vm-tier")
	}
	env := []string{vmtier.KernelEnv + "=" + kernel, vmtier.CacheEnv + "=" + cache}
	if vmtier.KVM() != nil {
		env = append(env, vmtier.EmulateEnv+"=1")
	}
	return env
}

// vmm is a guest's VMM as the host shows it: its pid, its run directory
// (the channel's socket) and its cgroup directories.
type vmm struct {
	pid     int
	dir     string
	cgroups []string
}

// guestsOf lists the VMMs the server process pid started.
func guestsOf(t *testing.T, pid int) []vmm {
	t.Helper()
	var out []vmm
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(pid) {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if !strings.Contains(string(cmdline), "qemu-system") {
			continue
		}
		v := vmm{pid: n}
		for _, a := range strings.Split(string(cmdline), "\x00") {
			if i := strings.Index(a, "path="); i >= 0 && strings.Contains(a, "id=ctl") {
				v.dir = filepath.Dir(strings.SplitN(a[i+len("path="):], ",", 2)[0])
			}
		}
		cg, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		for _, line := range strings.Split(string(cg), "\n") {
			parts := strings.SplitN(line, ":", 3)
			if len(parts) != 3 || !strings.Contains(parts[2], "stockade.vm-") {
				continue
			}
			cands := []string{"/sys/fs/cgroup/unified" + parts[2], "/sys/fs/cgroup" + parts[2]}
			if parts[1] != "" {
				cands = []string{"/sys/fs/cgroup/" + parts[1] + parts[2]}
				for _, c := range strings.Split(parts[1], ",") {
					cands = append(cands, "/sys/fs/cgroup/"+c+parts[2])
				}
			}
			for _, c := range cands {
				if _, err := os.Stat(c); err == nil {
					v.cgroups = append(v.cgroups, c)
				}
			}
		}
		out = append(out, v)
	}
	return out
}

// gone waits (a bounded while) for v's process, run directory and
// cgroups to be gone, and fails t naming what stayed.
func (v vmm) gone(t *testing.T) {
	t.Helper()
	var left []string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		left = nil
		if syscall.Kill(v.pid, 0) == nil {
			left = append(left, "process "+strconv.Itoa(v.pid))
		}
		for _, p := range append([]string{v.dir}, v.cgroups...) {
			if _, err := os.Stat(p); err == nil {
				left = append(left, p)
			}
		}
		if len(left) == 0 {
			return
		}
	}
	t.Errorf("the guest's VMM left on the host: %v", left)
}

// onlyGuest waits for the server's one warm guest and returns it.
func onlyGuest(t *testing.T, s *testServer) vmm {
	t.Helper()
	gs := guestsOf(t, s.cmd.Process.Pid)
	if len(gs) != 1 || gs[0].dir == "" || len(gs[0].cgroups) == 0 {
		t.Fatalf("want one VMM with a run directory and a cgroup, the warm guest: %+v", gs)
	}
	return gs[0]
}

// TestVMSessionThroughServe makes two sessions of a vm profile through
// stockade serve, each from the warm pool (--vm-pool 1: three guests
// boot in all, the last one killed at shutdown). The first keeps its
// state across execs, writes a file read back through the files routes
// and reads one sent with its create, and DELETE leaves nothing of its
// guest on the host. The second's VMM is SIGKILLed: its next exec
// answers 410, the session ended, and nothing of that guest is left.
func TestVMSessionThroughServe(t *testing.T) {
	env := vmServeEnv(t)
	bin := needServer(t)
	profile := filepath.Join(t.TempDir(), "vm.toml")
	if err := os.WriteFile(profile, []byte("extends = \"python\"\nisolation = \"vm\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(socketDir(t), "s.sock")
	cmd := exec.Command(bin, "serve", "--socket", sock, "--profile", profile, "--vm-pool", "1")
	cmd.Env = append(os.Environ(), env...)
	s := startServerReadyWithin(t, sock, cmd, 8*time.Minute)

	warm := onlyGuest(t, s)
	created := s.session(api.SessionRequest{Profile: profile, Files: map[string]string{"in.txt": base64.StdEncoding.EncodeToString([]byte("from the host"))}})
	if !created.Pool.Hit {
		t.Errorf("the session did not take the warm guest: %+v", created.Pool)
	}
	t.Logf("a create from the warm pool waited %.0f ms", created.Pool.WaitedMs)
	if r := s.cell(created.SessionID, "x = 41\nopen('/work/out.txt', 'w').write('from the guest')"); r.Verdict != api.ExecOK {
		t.Fatalf("first exec: %+v", r)
	}
	// The guest's kernel, not the host's, runs the session.
	var host unix.Utsname
	if err := unix.Uname(&host); err != nil {
		t.Fatal(err)
	}
	if r := s.cell(created.SessionID, "import os; print(x + 1, open('/work/in.txt').read(), os.uname().release)"); r.Verdict != api.ExecOK ||
		!strings.HasPrefix(r.Stdout, "42 from the host ") || strings.TrimSpace(strings.TrimPrefix(r.Stdout, "42 from the host ")) == unix.ByteSliceToString(host.Release[:]) {
		t.Fatalf("second exec: want 42, the host's file and a kernel release not the host's (%s), got %q (%s)", unix.ByteSliceToString(host.Release[:]), r.Stdout, r.Verdict)
	}
	if code, body := s.call("GET", "/v1/sessions/"+created.SessionID+"/files/out.txt", nil, nil); code != 200 || string(body) != "from the guest" {
		t.Fatalf("GET files/out.txt: %d %q", code, body)
	}
	if code, in := s.info(created.SessionID); code != 200 || in.SessionID != created.SessionID || in.ExecutionCount != 2 {
		t.Fatalf("GET the session: %d %+v", code, in)
	}
	code, body := s.call("DELETE", "/v1/sessions/"+created.SessionID, nil, nil)
	var end api.SessionEnd
	if code != 200 || json.Unmarshal(body, &end) != nil || end.SessionID != created.SessionID || end.Verdict != api.SessionClosed {
		t.Fatalf("DELETE: %d %s", code, body)
	}
	warm.gone(t)
	if code, _ := s.call("POST", "/v1/sessions/"+created.SessionID+"/exec", api.ExecRequest{Code: ptr("1")}, nil); code != 410 {
		t.Errorf("exec after DELETE: %d, want 410", code)
	}

	// The second session takes the guest the pool booted meanwhile.
	s.waitReadyWithin(8 * time.Minute)
	second := onlyGuest(t, s)
	created = s.session(api.SessionRequest{Profile: profile})
	if r := s.cell(created.SessionID, "y = 1"); r.Verdict != api.ExecOK {
		t.Fatalf("exec: %+v", r)
	}
	if err := syscall.Kill(second.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	second.gone(t)
	code, body = s.call("POST", "/v1/sessions/"+created.SessionID+"/exec", api.ExecRequest{Code: ptr("y")}, nil)
	if code != 410 || !strings.Contains(string(body), "SIGKILL") {
		t.Fatalf("exec after the VMM's SIGKILL: %d %s, want 410 saying the VMM was killed", code, body)
	}
	// The server's stop kills the guest the pool is booting (or has
	// booted) for the next session, and leaves nothing of it.
	rest := guestsOf(t, s.cmd.Process.Pid)
	s.stop()
	for _, g := range rest {
		g.gone(t)
	}
}

// TestVMSessionInPreparedRootfs: a session of a vm profile whose rootfs
// is a root `stockade rootfs build` made runs in that root inside the
// guest (its image the guest's second disk, the guest's jails' root),
// not in the guest's own root built from the host's Python: it sees
// dpkg's status file, which only the built root has, keeps its state
// between execs, cannot write its root, and leaves nothing after DELETE.
func TestVMSessionInPreparedRootfs(t *testing.T) {
	env := vmServeEnv(t)
	bin := needServer(t)
	root := clitest.BuiltRootfs(t)
	profile := filepath.Join(t.TempDir(), "vmroot.toml")
	if err := os.WriteFile(profile, fmt.Appendf(nil, "extends = \"python\"\nisolation = \"vm\"\n[filesystem]\nrootfs = %q\n", root), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(socketDir(t), "s.sock")
	cmd := exec.Command(bin, "serve", "--socket", sock, "--profile", profile, "--vm-pool", "0")
	cmd.Env = append(os.Environ(), env...)
	s := startServerReadyWithin(t, sock, cmd, 8*time.Minute)
	created := s.session(api.SessionRequest{Profile: profile})
	guest := onlyGuest(t, s)
	r := s.cell(created.SessionID, "import os\nbuilt = os.path.exists('/var/lib/dpkg/status')\nprint(built)")
	if r.Verdict != api.ExecOK || r.Stdout != "True\n" {
		t.Fatalf("first exec: %s stdout %q stderr %q: want the built root's dpkg status\n%s", r.Verdict, r.Stdout, r.Stderr, s.logString())
	}
	r = s.cell(created.SessionID, "import os\ntry:\n    open('/usr/x', 'w')\n    print(built, 'WRITABLE')\nexcept OSError:\n    print(built, 'read-only')")
	if r.Verdict != api.ExecOK || r.Stdout != "True read-only\n" {
		t.Fatalf("second exec: %s stdout %q: want the state kept and the root read-only", r.Verdict, r.Stdout)
	}
	if code, body := s.call("DELETE", "/v1/sessions/"+created.SessionID, nil, nil); code != 200 {
		t.Fatalf("DELETE: %d %s", code, body)
	}
	guest.gone(t)
}
