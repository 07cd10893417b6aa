package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/api"
)

// The jail leaves thousands of symlinks (or empty files past the file
// count cap) deep below /work, each with a long path. collectWork lists
// every one in files_skipped with no bound, so the server holds and sends
// back a response many times --files-max for a few MB of the jail's disk:
// a memory and CPU amplification outside any jail's cgroup.
func TestAttackUnboundedFilesSkipped(t *testing.T) {
	s := startServer(t, "--pool", "0", "--files-max", "1M")
	const n = 4000
	code, _, body := s.post(api.RunRequest{Code: code(fmt.Sprintf(`import os
for i in range(14):
    os.mkdir('D' * 250); os.chdir('D' * 250)
for i in range(%d):
    os.symlink('x', 'L%%07d' %% i + 'y' * 200)
`, n))})
	if code != 200 {
		t.Fatalf("POST: %d %.300s", code, body)
	}
	var r api.RunResponse
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	t.Logf("%.600s", r.Stderr)
	t.Logf("verdict %s, %d skipped entries, response %d bytes (--files-max 1M)", r.Verdict, len(r.FilesSkipped), len(body))
	if len(body) > 4<<20 {
		t.Errorf("the response is %d bytes for --files-max 1M: files_skipped (%d entries) is unbounded", len(body), len(r.FilesSkipped))
	}
}

// A local client asks for a streamed run and never reads its response. The
// server has no write deadline: the handler blocks writing the NDJSON
// lines, the jail's output is no longer drained, and the run never ends,
// so its concurrency slot, its budget and its jail are held for as long as
// the client keeps the connection open. --concurrency such connections
// (one uid, when --per-caller is not set) shut every other caller out.
func TestAttackStalledStreamingClientHoldsRun(t *testing.T) {
	s := startServer(t, "--pool", "0", "--concurrency", "1", "--queue-wait", "2s")
	c, err := net.Dial("unix", s.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body, _ := json.Marshal(api.RunRequest{Code: code(`import sys
for i in range(64):
    sys.stdout.write('x' * 16384 + '\n')
`), Limits: api.Limits{"timeout": "3s"}})
	fmt.Fprintf(c, "POST /v1/run HTTP/1.1\r\nHost: x\r\nAccept: application/x-ndjson\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	// Never read. The run's own timeout is 3s; give it plenty more.
	time.Sleep(12 * time.Second)
	var h api.Health
	s.get("/v1/health", &h)
	code2, _, out := s.post(api.RunRequest{Code: code("print(1)")})
	t.Logf("health running=%d; a second caller got %d %.200s", h.Running, code2, out)
	if h.Running != 0 || code2 != 200 {
		t.Errorf("a client that stopped reading still holds its run 9s past the run's timeout (running %d), and the next caller got %d", h.Running, code2)
	}
}

// The body is read and decoded before the per-caller cap, the concurrency
// gate and the queue are consulted, and reading it has no deadline (only
// the header has one). One local uid opens many connections, sends most of
// a --max-body request on each and stalls: the server holds every partial
// body, with no bound on connections, far past what --concurrency,
// --queue and --per-caller 1 suggest (2 requests' worth here).
func TestAttackStalledBodiesBypassCallerCap(t *testing.T) {
	s := startServer(t, "--pool", "0", "--concurrency", "1", "--queue", "1", "--per-caller", "1", "--max-body", "16M")
	pid := s.cmd.Process.Pid
	before := rssKB(t, pid)
	const conns, size = 12, 15 << 20
	chunk := bytes.Repeat([]byte("a"), 1<<20)
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range conns {
		c, err := net.Dial("unix", s.sock)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		fmt.Fprintf(c, "POST /v1/run HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{\"code\": \"", size)
		for range 14 {
			if _, err := c.Write(chunk); err != nil {
				t.Fatal(err)
			}
		}
	}
	time.Sleep(15 * time.Second) // past ReadHeaderTimeout: nothing closes them
	after := rssKB(t, pid)
	t.Logf("server RSS %d KiB before, %d KiB with %d stalled bodies", before, after, conns)
	if after-before > 96<<10 {
		t.Errorf("server RSS grew by %d MiB for one uid's stalled bodies (--per-caller 1, --concurrency 1, --queue 1)", (after-before)>>10)
	}
}

func rssKB(t *testing.T, pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	t.Fatal("no VmRSS")
	return 0
}
