package jail

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/testenv"
	"golang.org/x/sys/unix"
)

// hogAndHold runs code in a jail that prints one line once it holds what
// it took, and keeps holding it until cancel. It returns that line.
func hogAndHold(t *testing.T, code string) (line string, cancel func()) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	r, w := io.Pipe()
	done := make(chan *Result, 1)
	s := py(code)
	s.Timeout = 60 * time.Second
	go func() {
		res, err := Run(ctx, s, Streams{Stdout: w})
		if err != nil {
			t.Errorf("hog: %v", err)
		}
		w.Close()
		done <- res
	}()
	got := make(chan string, 1)
	go func() {
		br := bufio.NewReader(r)
		for {
			l, err := br.ReadString('\n')
			if err != nil || !strings.HasPrefix(l, "uid ") {
				got <- l
				break
			}
			t.Logf("hog: %s", strings.TrimSpace(l))
		}
		io.Copy(io.Discard, r)
	}()
	select {
	case line = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("the hog never said it was holding")
	}
	return strings.TrimSpace(line), func() {
		stop()
		if res := <-done; res != nil && res.Verdict != VerdictCancelled {
			t.Errorf("hog ended %s, want cancelled: %+v", res.Verdict, res)
		}
	}
}

// hostUID reads the host uid a jail runs as from its uid_map.
const printHostUID = "f = open('/proc/self/uid_map').read().split(); print('uid', f[1])\n"

// TestAttackPipeBuffersOfAnotherJail: one jail takes every pipe buffer page
// its user may have (fs.pipe-user-pages-soft), which the kernel counts per
// host uid; a jail running beside it must still get a large pipe buffer.
// With one host uid for all jails, F_SETPIPE_SZ failed there with EPERM.
func TestAttackPipeBuffersOfAnotherJail(t *testing.T) {
	testenv.NeedJail(t)
	testenv.NeedRoot(t, "per-run host uids are for stockade run as root")
	if b, _ := os.ReadFile("/proc/sys/fs/pipe-user-pages-soft"); strings.TrimSpace(string(b)) == "0" {
		t.Skip("fs.pipe-user-pages-soft is 0: no per-user pipe limit to exhaust")
	}
	line, cancel := hogAndHold(t, printHostUID+`
import fcntl, os, time
held = []
while True:
    r, w = os.pipe()
    try:
        fcntl.fcntl(w, 1031, 1 << 20)  # F_SETPIPE_SZ
    except OSError as e:
        print('full after', len(held), 'errno', e.errno, flush=True)
        break
    held.append((r, w))
    if len(held) > 100:
        print('never full', flush=True)
        break
time.sleep(60)
`)
	defer cancel()
	if !strings.HasPrefix(line, "full after") || !strings.HasSuffix(line, "errno 1") {
		t.Fatalf("the hog did not exhaust its pipe buffers: %q", line)
	}
	r := mustRun(t, py(printHostUID+`
import fcntl, os
r, w = os.pipe()
print('size', fcntl.fcntl(w, 1031, 1 << 20))
`))
	if r.Verdict != VerdictOK || !strings.Contains(r.Stdout, "size 1048576") {
		t.Errorf("the other jail could not size its pipe: %s %q %q", r.Verdict, r.Stdout, r.Stderr)
	}
	t.Logf("hog: %s; other jail: %q", line, r.Stdout)
}

// TestAttackMessageQueuesOfAnotherJail: POSIX message queue bytes are
// counted for the jail user and for the creator of the jail's user
// namespace (root, for every jail), against RLIMIT_MSGQUEUE; one jail
// filling its allowance must not make mq_open fail with EMFILE in another.
func TestAttackMessageQueuesOfAnotherJail(t *testing.T) {
	testenv.NeedJail(t)
	testenv.NeedRoot(t, "per-run host uids are for stockade run as root")
	uncapJailQueues()
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_MSGQUEUE, &rl) != nil || rl.Max != unix.RLIM_INFINITY {
		t.Skip("stockade cannot lift its own RLIMIT_MSGQUEUE here (no CAP_SYS_RESOURCE, as in a container): jails share one message queue allowance (docs/security.md, Known limits)")
	}
	const mqOpen = `
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.mq_open.restype = ctypes.c_int
def mq(name):
    fd = libc.mq_open(name.encode(), os.O_CREAT | os.O_RDWR, 0o600, None)
    return fd, ctypes.get_errno()
`
	line, cancel := hogAndHold(t, mqOpen+`
import time
n = 0
while True:
    fd, err = mq('/hog%d' % n)
    if fd < 0:
        print('full after', n, 'errno', err, flush=True)
        break
    n += 1
    if n > 1000:
        print('never full', flush=True)
        break
time.sleep(60)
`)
	defer cancel()
	if !strings.HasPrefix(line, "full after") || !strings.HasSuffix(line, fmt.Sprint("errno ", 24)) {
		t.Fatalf("the hog did not exhaust its message queue bytes: %q", line)
	}
	r := mustRun(t, py(mqOpen+`
fd, err = mq('/other')
print('fd', fd, 'errno', err)
`))
	if r.Verdict != VerdictOK || !strings.HasPrefix(r.Stdout, "fd ") || strings.HasPrefix(r.Stdout, "fd -1") {
		t.Errorf("mq_open failed in the other jail: %s %q %q", r.Verdict, r.Stdout, r.Stderr)
	}
	t.Logf("hog: %s; other jail: %q", line, r.Stdout)
}

// TestConcurrentRunsHaveDistinctHostUIDs: runs at once never share a host
// uid, and none is host root or the HostID every older jail shared.
func TestConcurrentRunsHaveDistinctHostUIDs(t *testing.T) {
	testenv.NeedJail(t)
	testenv.NeedRoot(t, "per-run host uids are for stockade run as root")
	const n = 4
	out := make(chan string, n)
	for range n {
		go func() {
			s := py(printHostUID + "import time; time.sleep(1)")
			ctx, cancel := jailContext(t, s)
			defer cancel()
			r, err := Run(ctx, s, Streams{})
			if err != nil || r.Verdict != VerdictOK {
				out <- fmt.Sprintf("error %v %+v", err, r)
				return
			}
			out <- strings.TrimSpace(r.Stdout)
		}()
	}
	seen := map[string]bool{}
	for range n {
		l := <-out
		var uid int
		if _, err := fmt.Sscanf(l, "uid %d", &uid); err != nil || uid <= HostID {
			t.Errorf("run reported %q, want a host uid above %d", l, HostID)
		}
		if seen[l] {
			t.Errorf("two concurrent runs had %s", l)
		}
		seen[l] = true
	}
}

// TestPayloadMessageQueueLimit: stockade may run with RLIMIT_MSGQUEUE
// lifted (uncapJailQueues), but the payload gets the kernel's default back,
// so one jail's queues stay bounded by its own allowance.
func TestPayloadMessageQueueLimit(t *testing.T) {
	testenv.NeedJail(t)
	r := mustRun(t, py("import resource; print(resource.getrlimit(resource.RLIMIT_MSGQUEUE))"))
	if want := fmt.Sprintf("(%d, %d)\n", jailMsgQueueBytes, jailMsgQueueBytes); r.Verdict != VerdictOK || r.Stdout != want {
		t.Errorf("payload's RLIMIT_MSGQUEUE: %s %q, want %q", r.Verdict, r.Stdout, want)
	}
}
