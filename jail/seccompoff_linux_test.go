package jail

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stockade/stockade/internal/testenv"
)

// otherDoors prints, from inside a jail, every door that does not depend
// on the seccomp filter: privileges (no_new_privs, the five capability
// sets), identity, the read-only root, the namespaces and what they hold,
// the namespace counts that keep new namespaces out, the rlimits and the
// pids limit.
const otherDoors = `
import ctypes, errno, os, resource, socket, threading
libc = ctypes.CDLL(None, use_errno=True)
status = dict(l.split(":", 1) for l in open("/proc/self/status"))
for k in ("Seccomp", "NoNewPrivs", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
    print(k, status[k].strip())
print("ids", os.getuid(), os.getgid())
try:
    os.setuid(0)
    print("setuid0 ok")
except OSError as e:
    print("setuid0", errno.errorcode[e.errno])
for p in ("/x", "/usr/x", "/etc/passwd"):
    try:
        open(p, "a").close()
        print("write", p, "ok")
    except OSError as e:
        print("write", p, errno.errorcode[e.errno])
for ns in ("user", "mnt", "pid", "net", "ipc", "uts", "cgroup"):
    print("ns", ns, os.readlink("/proc/self/ns/" + ns))
print("ifaces", ",".join(n for _, n in socket.if_nameindex()))
print("hostname", socket.gethostname())
print("pid", os.getpid())
# With a user namespace of its own, which brings the capabilities the rest
# need: only the namespace counts stop these.
for name, flag in (("user", 0), ("net", 0x40000000), ("mnt", 0x20000), ("pid", 0x20000000), ("ipc", 0x8000000)):
    ok = libc.unshare(0x10000000 | flag) == 0
    print("unshare", name, "ok" if ok else errno.errorcode[ctypes.get_errno()])
print("nofile", *resource.getrlimit(resource.RLIMIT_NOFILE))
print("fsize", *resource.getrlimit(resource.RLIMIT_FSIZE))
n = 0
while n < 100 and libc.inotify_init1(0) >= 0:
    n += 1
print("inotify", n)
hold, n = threading.Event(), 0
try:
    while n < 200:
        threading.Thread(target=hold.wait, daemon=True).start()
        n += 1
except RuntimeError:
    pass
hold.set()
print("threads", n)
`

// TestSeccompOffKeepsEveryOtherDoor: --seccomp off drops the filter and
// nothing else. no_new_privs going unset there was seen by no test (with a
// filter, loading it fails without no_new_privs; without one nothing
// looked). Every door but the filter's must hold in such a jail, and the
// memory limit in a second one.
func TestSeccompOffKeepsEveryOtherDoor(t *testing.T) {
	testenv.NeedJail(t)
	s := py(otherDoors)
	s.Seccomp = SeccompOff
	s.Cgroup.PidsMax = 32
	r := mustRun(t, s)
	seen := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		k, v, _ := strings.Cut(line, " ")
		if k == "ns" || k == "write" || k == "unshare" {
			name, rest, _ := strings.Cut(v, " ")
			k, v = k+" "+name, rest
		}
		seen[k] = v
	}
	zero := "0000000000000000"
	want := map[string]string{
		"Seccomp": "0", "NoNewPrivs": "1",
		"CapInh": zero, "CapPrm": zero, "CapEff": zero, "CapBnd": zero, "CapAmb": zero,
		"ids": "1000 1000", "setuid0": "EINVAL", // uid 0 is not mapped at all
		"write /x": "EROFS", "write /usr/x": "EROFS", "write /etc/passwd": "EROFS",
		"ifaces": "lo", "hostname": "stockade",
		// The jail's user namespace allows no namespace at all.
		"unshare user": "ENOSPC", "unshare net": "ENOSPC", "unshare mnt": "ENOSPC", "unshare pid": "ENOSPC", "unshare ipc": "ENOSPC",
		"nofile": "256 256", "fsize": fmt.Sprintf("%d %d", 64<<20, 64<<20),
	}
	for k, v := range want {
		if seen[k] != v {
			t.Errorf("with seccomp off, %s is %q, want %q", k, seen[k], v)
		}
	}
	for _, ns := range []string{"user", "mnt", "pid", "net", "ipc", "uts", "cgroup"} {
		host, err := os.Readlink("/proc/self/ns/" + ns)
		if err != nil {
			t.Fatal(err)
		}
		if got := seen["ns "+ns]; got == "" || got == host {
			t.Errorf("with seccomp off, the jail's %s namespace is %q, the host's %q", ns, got, host)
		}
	}
	if pid, err := strconv.Atoi(seen["pid"]); err != nil || pid > 64 {
		t.Errorf("with seccomp off, the payload is pid %q: not in a pid namespace of its own", seen["pid"])
	}
	if n, err := strconv.Atoi(seen["inotify"]); err != nil || n == 0 || n > 16 {
		t.Errorf("with seccomp off, the jail opened %q inotify instances, want 1-16", seen["inotify"])
	}
	if n, err := strconv.Atoi(seen["threads"]); err != nil || n == 0 || n >= 32 || r.Verdict != VerdictPids {
		t.Errorf("with seccomp off under a pids limit of 32, the jail started %q threads, verdict %s", seen["threads"], r.Verdict)
	}
	if t.Failed() {
		t.Logf("the jail printed:\n%s%s", r.Stdout, r.Stderr)
	}

	m := py("b = bytearray(512 << 20); print('allocated', len(b))")
	m.Seccomp = SeccompOff
	m.Cgroup.MemoryMax = 64 << 20
	if r := mustRun(t, m); r.Verdict != VerdictMemory || strings.Contains(r.Stdout, "allocated") {
		t.Errorf("with seccomp off, 512M under a memory limit of 64M: verdict %s, stdout %q", r.Verdict, r.Stdout)
	}
}
