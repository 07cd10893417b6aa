package vmtier

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/jail"
	"golang.org/x/sys/unix"
)

// A VMM that QEMU's own bug hands to the guest sees the host as QEMU does:
// checked from the host while the guest runs, QEMU is an unprivileged uid
// with no capability and no_new_privs, its root holds only the files it
// needs (no /etc/shadow, no /home), none of them writable, and the guest
// still answers.
func TestAttackVMMSeesHostFiles(t *testing.T) {
	o := needVM(t)
	left := watch(&o)
	t0, err := resolve(vmSpec(t), o)
	if err != nil {
		t.Fatal(err)
	}
	want, err := qemuFiles(t0.qemu)
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, t0.vmmExposed()...)
	want = append(want, "/dev/null", "/dev/urandom", "/dev/kvm")
	seen := make(chan []string, 1)
	o.onHello = func(pid int) {
		var wrong []string
		status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		fields := map[string]string{}
		for _, line := range strings.Split(string(status), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok {
				fields[k] = strings.TrimSpace(v)
			}
		}
		for _, k := range []string{"Uid", "Gid"} {
			for _, id := range strings.Fields(fields[k]) {
				if id == "0" {
					wrong = append(wrong, fmt.Sprintf("%s: %s (root)", k, fields[k]))
					break
				}
			}
		}
		for _, k := range []string{"CapEff", "CapPrm", "CapInh", "CapBnd", "CapAmb"} {
			if fields[k] != "0000000000000000" {
				wrong = append(wrong, fmt.Sprintf("%s: %q", k, fields[k]))
			}
		}
		if fields["NoNewPrivs"] != "1" {
			wrong = append(wrong, fmt.Sprintf("NoNewPrivs: %q", fields["NoNewPrivs"]))
		}
		root := fmt.Sprintf("/proc/%d/root", pid)
		for _, p := range []string{"/etc/shadow", "/etc", "/home", "/root", "/proc", os.Args[0]} {
			if _, err := os.Lstat(root + p); !errors.Is(err, fs.ErrNotExist) {
				wrong = append(wrong, fmt.Sprintf("%s is there (%v)", p, err))
			}
		}
		files := 0
		err := filepath.WalkDir(root+"/", func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel := strings.TrimPrefix(p, root)
			if rel == left.dir {
				return filepath.SkipDir // the run directory: its sockets
			}
			if d.IsDir() {
				return nil
			}
			files++
			if !slices.Contains(want, rel) {
				wrong = append(wrong, "not QEMU's: "+rel)
			}
			return nil
		})
		if err != nil || files == 0 {
			wrong = append(wrong, fmt.Sprintf("walk %s: %d files (%v)", root, files, err))
		}
		// Nothing but the run directory is writable, even for root. The
		// probes are new names, removed if made, and the binary is opened
		// without truncating: a QEMU left in the host's root (a mutant's)
		// must not cost the host a file.
		probe := "stockade-probe-" + newID()
		for _, d := range []string{"/", "/usr/", filepath.Dir(t0.qemu) + "/"} {
			f, err := os.OpenFile(root+d+probe, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
			if err == nil {
				f.Close()
				os.Remove(root + d + probe)
			}
			if !errors.Is(err, syscall.EROFS) {
				wrong = append(wrong, fmt.Sprintf("create %s: %v, want EROFS", d+probe, err))
			}
		}
		// The kernel, not QEMU's running binary (whose busy text the
		// kernel refuses first, read-only or not).
		f, err := os.OpenFile(root+t0.kernel, os.O_WRONLY, 0)
		if err == nil {
			f.Close()
		}
		if !errors.Is(err, syscall.EROFS) {
			wrong = append(wrong, fmt.Sprintf("open %s for writing: %v, want EROFS", t0.kernel, err))
		}
		seen <- wrong
	}
	spec := vmSpec(t, "python3", "-c", "print(1 + 2)")
	spec.Timeout = 60 * time.Second
	res, err := runVM(t, spec, o)
	if err != nil || res.Verdict != jail.VerdictOK || strings.TrimSpace(string(res.Stdout)) != "3" {
		t.Errorf("verdict %s stdout %q, err %v", res.Verdict, res.Stdout, err)
	}
	select {
	case wrong := <-seen:
		for _, w := range wrong {
			t.Errorf("the VMM: %s", w)
		}
	default:
		t.Error("the guest never said hello")
	}
	left.check(t)
}

// A step of the VMM's jail that fails fails the run with a setup error
// naming the step and the path: QEMU never starts less confined, and
// nothing is left. Here the helper's bind of a file inside a directory it
// bound read-only just before cannot make its mount point.
func TestVMMJailFailsClosed(t *testing.T) {
	o := needVM(t)
	left := watch(&o)
	dir := t.TempDir()
	inside := filepath.Join(dir, "f")
	if err := os.WriteFile(inside, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	o.vmmTools = []string{dir, inside}
	o.onHello = func(int) { t.Error("QEMU ran") }
	res, err := runVM(t, vmSpec(t, "python3", "-c", "print(1 + 2)"), o)
	var se *jail.SetupError
	if !errors.As(err, &se) || res.ExitCode != jail.ExitJailError {
		t.Fatalf("exit %d, err %v: want a setup error", res.ExitCode, err)
	}
	t.Logf("the run: %v", err)
	if want := "confine the VMM: files: "; !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), inside) {
		t.Errorf("error %q: want %q and %s", err, want, inside)
	}
	left.check(t)
}

// fakeVMM is this test binary exec'd by the VMM's jail in QEMU's place
// (TestVMMJailBeforeQEMUsSandbox): it reports, on the console, what the
// jail alone gave it, before any sandbox of QEMU's own could add to it.
func init() {
	if os.Getpid() != 1 || len(os.Args) < 2 || os.Args[1] != "-nodefaults" {
		return
	}
	var wrong []string
	if os.Getuid() == 0 || os.Geteuid() == 0 || os.Getgid() == 0 {
		wrong = append(wrong, fmt.Sprintf("uid %d euid %d gid %d", os.Getuid(), os.Geteuid(), os.Getgid()))
	}
	if v, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0); err != nil || v != 1 {
		wrong = append(wrong, fmt.Sprintf("no_new_privs %d (%v)", v, err))
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var d [2]unix.CapUserData
	if err := unix.Capget(&hdr, &d[0]); err != nil || d[0].Effective|d[0].Permitted|d[1].Effective|d[1].Permitted != 0 {
		wrong = append(wrong, fmt.Sprintf("capabilities %+v (%v)", d, err))
	}
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if v, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0); err == nil && v == 1 {
			wrong = append(wrong, fmt.Sprintf("bounding set holds cap %d", c))
			break
		}
	}
	for _, p := range []string{"/etc", "/home", "/proc"} {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			wrong = append(wrong, fmt.Sprintf("%s is there (%v)", p, err))
		}
	}
	if err := os.Mkdir("/probe", 0o755); !errors.Is(err, syscall.EROFS) {
		wrong = append(wrong, fmt.Sprintf("mkdir /probe: %v, want EROFS", err))
	}
	if len(wrong) == 0 {
		fmt.Println("fake vmm: confined")
	} else {
		fmt.Println("fake vmm: not confined:", strings.Join(wrong, "; "))
	}
	os.Exit(1)
}

// What the jail alone gives the VMM, seen by a fake VMM (this binary) in
// QEMU's place: QEMU's -sandbox sets no_new_privs and forbids setuid
// itself, so a check of the running QEMU cannot tell the jail's share.
func TestVMMJailBeforeQEMUsSandbox(t *testing.T) {
	o := needVM(t)
	left := watch(&o)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	o.QEMU = self
	res, err := runVM(t, vmSpec(t, "python3", "-c", "print(1 + 2)"), o)
	if err == nil || res.Verdict != VerdictDied {
		t.Fatalf("verdict %s, err %v: want vm_died", res.Verdict, err)
	}
	if !strings.Contains(err.Error(), "fake vmm: confined") {
		t.Errorf("the fake VMM: %v", err)
	}
	left.check(t)
}
