package jail

import (
	"strings"
	"testing"

	"github.com/stockade/stockade/internal/testenv"
)

// TestAttackInitForgedFault: Go's runtime takes SIGSEGV, SIGBUS, SIGFPE,
// SIGILL, SIGTRAP, SIGSYS and SIGSTKFLT for a fault of its own, and
// crashes, unless their si_code says kill() or tgkill() sent them; catching
// them with signal.Notify does not change that. The payload runs as the
// uid of init's main thread, so it may signal init: sigqueue (si_code
// SI_QUEUE) and a descriptor whose owner is init with F_SETSIG (si_code
// POLL_IN) took init down with a Go stack trace, and the run with it.
func TestAttackInitForgedFault(t *testing.T) {
	testenv.NeedJail(t)
	r := mustRun(t, py(`
import ctypes, fcntl, os, signal, socket, time
libc = ctypes.CDLL(None, use_errno=True)
class sigval(ctypes.Union):
    _fields_ = [("sival_int", ctypes.c_int), ("sival_ptr", ctypes.c_void_p)]
libc.sigqueue.argtypes = [ctypes.c_int, ctypes.c_int, sigval]
F_SETSIG = 10
for s in (signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL, signal.SIGTRAP,
          signal.SIGSYS, 16):
    if libc.sigqueue(1, s, sigval(0)) != 0:
        print("sigqueue", s, "errno", ctypes.get_errno())
    a, b = socket.socketpair()
    fcntl.fcntl(a.fileno(), fcntl.F_SETOWN, 1)
    fcntl.fcntl(a.fileno(), F_SETSIG, s)
    fcntl.fcntl(a.fileno(), fcntl.F_SETFL, os.O_ASYNC | os.O_NONBLOCK)
    b.send(b"x")
    time.sleep(0.05)
time.sleep(0.2)
print("alive")
`))
	if !strings.HasSuffix(r.Stdout, "alive\n") || r.Verdict != VerdictOK {
		t.Fatalf("the payload took init down: verdict %s, exit %d, stdout %q, stderr %.300q", r.Verdict, r.ExitCode, r.Stdout, r.Stderr)
	}
}
