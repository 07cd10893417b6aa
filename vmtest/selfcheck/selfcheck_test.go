// Package selfcheck proves the vmtest VM is the environment the integration
// tests are promised: root, cgroup v2 with the cpu, memory and pids
// controllers usable from the test's own cgroup, and a Python that can
// import what the stdlib jail profiles expect. It only runs inside the VM.
package selfcheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stockade/stockade/internal/testenv"
)

const cgroupRoot = "/sys/fs/cgroup"

// ownCgroup returns the cgroup v2 path of this process relative to cgroupRoot,
// from the single "0::" line cgroup v2 writes to /proc/self/cgroup.
func ownCgroup(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatalf("read /proc/self/cgroup: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			return rest
		}
	}
	t.Fatalf("/proc/self/cgroup has no cgroup v2 line:\n%s", data)
	return ""
}

func TestIsRoot(t *testing.T) {
	testenv.NeedVM(t)
	if uid := os.Geteuid(); uid != 0 {
		t.Fatalf("euid = %d, want 0", uid)
	}
}

func TestCgroupV2Unified(t *testing.T) {
	testenv.NeedVM(t)
	// cgroup.controllers exists only at the root of a cgroup2 mount; on a v1 or
	// hybrid host /sys/fs/cgroup is a tmpfs of per-controller mounts.
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err != nil {
		t.Fatalf("%s is not a cgroup2 mount: %v", cgroupRoot, err)
	}
	if data, err := os.ReadFile("/proc/self/cgroup"); err != nil || strings.TrimSpace(string(data)) != "0::"+ownCgroup(t) {
		t.Fatalf("/proc/self/cgroup is not pure v2: %q (err %v)", data, err)
	}
}

func TestControllersDelegated(t *testing.T) {
	testenv.NeedVM(t)
	own := ownCgroup(t)
	data, err := os.ReadFile(filepath.Join(cgroupRoot, own, "cgroup.controllers"))
	if err != nil {
		t.Fatalf("read own cgroup's controllers: %v", err)
	}
	have := map[string]bool{}
	for _, c := range strings.Fields(string(data)) {
		have[c] = true
	}
	t.Logf("own cgroup %s, controllers %q", own, strings.TrimSpace(string(data)))
	for _, want := range []string{"cpu", "memory", "pids"} {
		if !have[want] {
			t.Errorf("controller %s not available in %s", want, own)
		}
	}
	// A test runs like a systemd unit with Delegate=yes: in a non-root cgroup
	// that holds processes, so whoever wants child cgroups must first move
	// into a leaf (cgroup v2's "no internal processes" rule).
	if own == "/" {
		t.Errorf("test runs in the root cgroup; want a delegated non-root cgroup")
	}
}

func TestPythonStdlib(t *testing.T) {
	testenv.NeedVM(t)
	out, err := exec.Command("/usr/bin/python3", "-c",
		"import json, ssl, sqlite3, ctypes, multiprocessing, sys; print(sys.version.split()[0], ssl.OPENSSL_VERSION, sqlite3.sqlite_version)").CombinedOutput()
	if err != nil {
		t.Fatalf("python3 imports failed: %v\n%s", err, out)
	}
	t.Logf("python: %s", strings.TrimSpace(string(out)))
}

func TestKernel(t *testing.T) {
	testenv.NeedVM(t)
	release, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		t.Fatalf("read osrelease: %v", err)
	}
	t.Logf("kernel %s", strings.TrimSpace(string(release)))
	for _, path := range []string{"/proc/self/ns/user", "/proc/self/ns/cgroup", "/proc/self/ns/pid"} {
		if _, err := os.Stat(path); err != nil {
			t.Errorf("namespace missing: %v", err)
		}
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil || !strings.Contains(string(status), "Seccomp_filters:") {
		t.Errorf("kernel without seccomp filter support (err %v)", err)
	}
}
