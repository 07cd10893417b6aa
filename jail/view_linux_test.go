package jail

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stockade/stockade/internal/testenv"
)

// viewAttack tries every way the payload might lift the generated limits
// files to see the host's figures: unmount them, mount over them, remount
// them writable, write, chmod, unlink or rename them, mount a fresh procfs,
// or take a new user namespace to gain the capabilities for any of that.
// It prints each attempt that succeeded, then what meminfo and the CPU list
// say afterwards.
const viewAttack = `
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
MS_BIND, MS_REMOUNT, MS_RDONLY, MNT_DETACH = 4096, 32, 1, 2
CLONE_NEWUSER, CLONE_NEWNS = 0x10000000, 0x00020000
opened = []
def attempt(name, ok):
    if ok:
        opened.append(name)
for p in ["/proc/meminfo", "/sys/devices/system/cpu/online"]:
    b = p.encode()
    attempt("umount " + p, libc.umount2(b, MNT_DETACH) == 0)
    attempt("umount lazily " + p, libc.umount2(b, 0) == 0)
    attempt("bind over " + p, libc.mount(b"/etc/hostname", b, None, MS_BIND, None) == 0)
    attempt("remount rw " + p, libc.mount(None, b, None, MS_REMOUNT | MS_BIND, None) == 0)
    try:
        with open(p, "w") as f:
            f.write("MemTotal: 1 kB\n")
        attempt("write " + p, True)
    except OSError:
        pass
    for name, fn in [("chmod", lambda: os.chmod(p, 0o666)), ("unlink", lambda: os.unlink(p)),
                     ("rename", lambda: os.rename("/tmp/x", p))]:
        open("/tmp/x", "w").close()
        try:
            fn()
            attempt(name + " " + p, True)
        except OSError:
            pass
os.makedirs("/tmp/proc", exist_ok=True)
attempt("mount a new procfs", libc.mount(b"proc", b"/tmp/proc", b"proc", 0, None) == 0)
attempt("unshare a user namespace", libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) == 0)
print("opened:", opened)
m = {l.split(":")[0]: l.split()[1] for l in open("/proc/meminfo")}
print(m["MemTotal"], m["MemAvailable"], open("/sys/devices/system/cpu/online").read().count(",") + 1, os.cpu_count())
`

// TestAttackLiftLimitsView: the generated /proc/meminfo and CPU list hold
// against the payload under the python policy, and with the filter off,
// where only the missing capabilities and the user-namespace limits stand
// in the way.
func TestAttackLiftLimitsView(t *testing.T) {
	testenv.NeedJail(t)
	for _, policy := range []string{"python", "off"} {
		t.Run(policy, func(t *testing.T) {
			s := py(viewAttack)
			s.Seccomp = policy
			s.Cgroup.MemoryMax, s.Cgroup.CPUs = 200<<20, 1
			r := mustRun(t, s)
			want := fmt.Sprintf("opened: []\n%d %d 1 1\n", 200<<10, 200<<10)
			if r.Verdict != VerdictOK || r.Stdout != want {
				t.Fatalf("verdict %s\nstdout:\n%s\nwant:\n%s\nstderr:\n%s", r.Verdict, r.Stdout, want, r.Stderr)
			}
			if policy == "python" && !strings.Contains(fmt.Sprint(r.BlockedSyscalls), "umount2") {
				t.Errorf("the filter did not refuse umount2: %+v", r.BlockedSyscalls)
			}
		})
	}
}

// Without a cgroup there are no limits to show: the jail sees the host.
func TestNoCgroupNoLimitsView(t *testing.T) {
	testenv.NeedJail(t)
	s := py(`import os; print(os.path.exists("/sys/devices/system/cpu/online"))`)
	s.Host.NoCgroup = true
	if r := mustRun(t, s); r.Stdout != "False\n" {
		t.Fatalf("%+v", r)
	}
}
