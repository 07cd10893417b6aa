package jail

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/testenv"
)

// tcpHoard fills TCP buffers on the jail's own loopback: 64 connections
// whose receivers never read, each sender writing until the kernel
// refuses more, and prints how many bytes the kernel took.
const tcpHoard = `
import socket, time
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(128)
conns, held = [], 0
for _ in range(64):
    c = socket.create_connection(srv.getsockname()); a, _ = srv.accept()
    c.setblocking(False); conns.append((c, a))
for _ in range(20):
    grew = 0
    for c, _ in conns:
        try:
            while True:
                n = c.send(b"x" * 65536); held += n; grew += n
        except (BlockingIOError, OSError):
            pass
    if not grew:
        break
    time.sleep(0.05)
print("held", held)
`

// On cgroup v1 the kernel counts TCP buffers only once
// memory.kmem.tcp.limit_in_bytes is set: under --memory 64M one process
// held 457 MiB of loopback buffers, charged to no one. v2 counts them in
// memory.current.
func TestAttackTCPBuffersBeyondMemoryLimit(t *testing.T) {
	testenv.NeedJail(t)
	const limit = 64 << 20
	s := py(tcpHoard)
	s.Cgroup.MemoryMax = limit
	s.Timeout = 60 * time.Second
	r := mustRun(t, s)
	if r.Verdict == VerdictMemory && r.PeakMemoryBytes <= limit+1<<20 {
		// v2 charges socket buffers to memory.current: the limit holds
		// them, and the next allocation past it is an OOM kill. The
		// network stack may force-charge a few pages past memory.max
		// before that kill (seen in the VM: 40 KiB over 64 MiB), so the
		// peak may pass the limit by that much, never by hundreds of MiB.
		t.Logf("the memory limit ended the run at a peak of %d MiB", r.PeakMemoryBytes>>20)
		return
	}
	f := strings.Fields(r.Stdout)
	if len(f) != 2 || f[0] != "held" {
		t.Fatalf("%+v", r)
	}
	held, _ := strconv.ParseInt(f[1], 10, 64)
	t.Logf("verdict %s, the jail's sockets took %d MiB, peak memory %d MiB", r.Verdict, held>>20, r.PeakMemoryBytes>>20)
	if held > limit {
		t.Fatalf("the jail held %d MiB of TCP buffers under a %d MiB memory limit", held>>20, limit>>20)
	}
}
