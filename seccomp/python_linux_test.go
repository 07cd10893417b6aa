package seccomp

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	libseccomp "github.com/seccomp/libseccomp-golang"
)

// Real CPython under the filter, forked and exec'd from the filtered thread
// the way the jail's init does it.

func requirePython(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(pythonPath); err != nil {
		t.Skipf("no %s: %v", pythonPath, err)
	}
}

// pythonArgs writes script to a file (multiprocessing's spawn and forkserver
// re-import __main__ by path) and returns python3's arguments to run it.
func pythonArgs(t testing.TB, script string, scriptArgs ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "script.py")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	args, _ := json.Marshal(append([]string{"-I", path}, scriptArgs...))
	return string(args)
}

// runPython runs script under policy and returns the run; it fails the test
// if Python did not exit 0.
func runPython(t *testing.T, policy, script string, scriptArgs ...string) helperRun {
	t.Helper()
	requirePython(t)
	run := runHelper(t, "exec", policy, pythonArgs(t, script, scriptArgs...))
	if run.Err != nil {
		t.Fatalf("python under %s: %v\nstdout:\n%s\nstderr:\n%s\nreported: %s", policy, run.Err, run.Stdout, run.Stderr, blockedSummary(run.Blocked))
	}
	return run
}

// workloadScript exercises what the issue lists a Python program must keep:
// threads, subprocess of /bin/sh, multiprocessing with every start method,
// an AF_UNIX socketpair, sqlite3 in a temporary directory, asyncio with a
// subprocess and a TCP round trip over loopback, numpy.linalg.inv.
const workloadScript = `
import asyncio, concurrent.futures, multiprocessing, os, socket, sqlite3, subprocess, sys, tempfile, threading

def status():
    with open("/proc/self/status") as f:
        return {k: v.strip() for k, v in (l.split(":", 1) for l in f if l.startswith("Seccomp"))}
st = status()
assert st["Seccomp"] == "2", st

# The listener never reaches the payload.
for fd in os.listdir("/proc/self/fd"):
    try:
        target = os.readlink("/proc/self/fd/" + fd)
    except OSError:
        continue
    assert "seccomp" not in target, (fd, target)

out = []
ts = [threading.Thread(target=out.append, args=(i,)) for i in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
assert sorted(out) == list(range(8))
with concurrent.futures.ThreadPoolExecutor(4) as ex:
    assert sum(ex.map(lambda x: x * x, range(10))) == 285

r = subprocess.run(["/bin/sh", "-c", "echo $((6*7))"], capture_output=True, text=True, check=True)
assert r.stdout.strip() == "42", r

def square(x):
    return x * x

if __name__ == "__main__":
    for method in ("fork", "spawn", "forkserver"):
        ctx = multiprocessing.get_context(method)
        with ctx.Pool(2) as pool:
            assert pool.map(square, range(6)) == [0, 1, 4, 9, 16, 25], method

    a, b = socket.socketpair()
    a.sendall(b"ping"); assert b.recv(4) == b"ping"
    a.close(); b.close()

    with tempfile.TemporaryDirectory() as d:
        db = sqlite3.connect(os.path.join(d, "t.db"))
        db.execute("create table t (x)"); db.executemany("insert into t values (?)", [(i,) for i in range(100)])
        db.commit()
        assert db.execute("select sum(x) from t").fetchone()[0] == 4950
        db.close()

    async def main():
        async def handle(reader, writer):
            writer.write((await reader.readline()).upper()); await writer.drain(); writer.close()
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"hello\n"); await writer.drain()
        assert await reader.readline() == b"HELLO\n"
        writer.close(); server.close(); await server.wait_closed()
        proc = await asyncio.create_subprocess_exec("/bin/sh", "-c", "exit 3")
        assert await proc.wait() == 3
        await asyncio.sleep(0.01)
        loop = asyncio.get_running_loop()
        assert await loop.run_in_executor(None, sum, [1, 2, 3]) == 6
    if "strict" in sys.argv:
        try:
            socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            raise SystemExit("strict allowed an AF_INET socket")
        except PermissionError:
            pass
    else:
        asyncio.run(main())

    import numpy
    m = numpy.array([[4.0, 7.0], [2.0, 6.0]])
    assert numpy.allclose(numpy.linalg.inv(m) @ m, numpy.eye(2))
    numpy.random.default_rng(0).random((200, 200)) @ numpy.ones((200, 200))

    print("workload ok")
`

// TestPythonWorkloadUnderFilter: a broad Python workload passes under the
// default policy and makes not one refused call, so a clean run's report is
// empty.
func TestPythonWorkloadUnderFilter(t *testing.T) {
	run := runPython(t, "python", workloadScript)
	if !strings.Contains(string(run.Stdout), "workload ok") {
		t.Errorf("stdout %q", run.Stdout)
	}
	if len(run.Blocked) != 0 {
		t.Errorf("a clean workload made refused calls: %s", blockedSummary(run.Blocked))
	}
}

// TestPythonWorkloadUnderStrict: the same without the network; the one
// refused call is the AF_INET socket the script tries on purpose.
func TestPythonWorkloadUnderStrict(t *testing.T) {
	run := runPython(t, "strict", workloadScript, "strict")
	if !strings.Contains(string(run.Stdout), "workload ok") {
		t.Errorf("stdout %q", run.Stdout)
	}
	if len(run.Blocked) != 1 || run.Blocked[0].Example != "socket(AF_INET, SOCK_STREAM|SOCK_CLOEXEC, 0)" {
		t.Errorf("reported %s, want only the AF_INET socket", blockedSummary(run.Blocked))
	}
}

// TestPythonRefusedCallsRaisePermissionError calls every refused system call
// raw through ctypes with all-ones arguments: each must fail with EPERM and
// be reported. socket(AF_PACKET) and unshare(CLONE_NEWUSER) through the
// standard library and libc must raise PermissionError or fail with EPERM.
func TestPythonRefusedCallsRaisePermissionError(t *testing.T) {
	p, _ := Lookup("python")
	arch, _ := libseccomp.GetNativeArch()
	numbers := map[string]int{}
	for _, g := range p.Refuse {
		for _, c := range g.Calls {
			nr, err := libseccomp.GetSyscallFromNameByArch(c, arch)
			if err == nil && nr >= 0 {
				numbers[c] = int(nr)
			}
		}
	}
	js, _ := json.Marshal(numbers)
	script := `
import ctypes, errno, json, socket
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
calls = json.loads('` + string(js) + `')
bad = {}
m1 = ctypes.c_long(-1)
for name, nr in sorted(calls.items()):
    r = libc.syscall(ctypes.c_long(nr), m1, m1, m1, m1, m1, m1)
    e = ctypes.get_errno()
    if r != -1 or e != errno.EPERM:
        bad[name] = (r, errno.errorcode.get(e, e))
assert not bad, bad
try:
    socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0x0300)
    raise SystemExit("AF_PACKET socket opened")
except PermissionError:
    pass
try:
    socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
    raise SystemExit("AF_NETLINK socket opened")
except PermissionError:
    pass
CLONE_NEWUSER = 0x10000000
if libc.unshare(CLONE_NEWUSER) != -1 or ctypes.get_errno() != errno.EPERM:
    raise SystemExit("unshare(CLONE_NEWUSER) was not refused")
print("refusals ok", len(calls))
`
	run := runPython(t, "python", script)
	if !strings.Contains(string(run.Stdout), "refusals ok") {
		t.Errorf("stdout %q", run.Stdout)
	}
	for c := range numbers {
		if _, ok := run.blocked(c); !ok {
			t.Errorf("%s from Python was not reported", c)
		}
	}
	if b, ok := run.blocked("socket"); !ok || b.Count != 2 || b.Example != "socket(AF_PACKET, SOCK_RAW|SOCK_CLOEXEC, 768)" {
		t.Errorf("socket report %+v, want 2 refusals with the AF_PACKET example", b)
	}
	if b, ok := run.blocked("unshare"); !ok || b.Count != 2 {
		t.Errorf("unshare report %+v, want 2 (raw and libc)", b)
	}
}

// TestPythonForeignABIIsKilled: Python code that enters the kernel through
// the i386 gate (int 0x80) or the x32 numbering is killed with SIGSYS.
func TestPythonForeignABIIsKilled(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("i386 and x32 exist only on x86_64")
	}
	requirePython(t)
	scripts := map[string]string{
		"i386 int 0x80": `
import ctypes, mmap
# mov eax, 20 (getpid on i386); int 0x80; ret
code = bytes([0xb8, 20, 0, 0, 0, 0xcd, 0x80, 0xc3])
m = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
m.write(code)
addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
print("i386 getpid returned", ctypes.CFUNCTYPE(ctypes.c_int)(addr)())
`,
		"x32 getpid": `
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print("x32 getpid returned", libc.syscall(0x40000000 | 39))
`,
	}
	for name, script := range scripts {
		t.Run(name, func(t *testing.T) {
			if name == "i386 int 0x80" {
				// Some hosts' kernels (a paravirtualised guest, say) give
				// no i386 gate at all: int 0x80 faults with SIGSEGV with
				// no filter loaded, so the filter is never asked. Ask the
				// kernel first, unfiltered; where the gate exists the
				// filter must kill.
				bare := exec.Command("python3", "-I", "-c", script)
				if err := bare.Run(); err != nil {
					var exit *exec.ExitError
					if errors.As(err, &exit) && exit.Sys().(syscall.WaitStatus).Signal() == syscall.SIGSEGV {
						t.Skip("this kernel has no i386 gate: int 0x80 faults with SIGSEGV with no filter loaded")
					}
				}
			}
			run := runHelper(t, "exec", "python", pythonArgs(t, script))
			var exit *exec.ExitError
			if !errors.As(run.Err, &exit) || exit.ExitCode() != 128+int(syscall.SIGSYS) {
				t.Fatalf("helper: %v, want python killed by SIGSYS (exit %d)\nstdout %q\nstderr %q", run.Err, 128+int(syscall.SIGSYS), run.Stdout, run.Stderr)
			}
		})
	}
}
