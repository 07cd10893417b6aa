package server

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// vmHWMKiB is a process's peak resident set so far, from /proc.
func vmHWMKiB(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// floodBodies are two request bodies just under --max-body 16M: one whose
// bulk is a file (base64), one whose bulk is stdin.
func floodBodies(t *testing.T) [][]byte {
	const maxBody = 16 << 20
	raw := bytes.Repeat([]byte{0xa5, 0x5a, 0x00, 0xff}, (maxBody/4*3-1024)/4)
	files := []byte(`{"code": "pass", "files": {"in": "` + base64.StdEncoding.EncodeToString(raw) + `"}}`)
	stdin := []byte(`{"code": "pass", "stdin": "` + strings.Repeat("a", maxBody-1024) + `"}`)
	for _, b := range [][]byte{files, stdin} {
		if len(b) > maxBody {
			t.Fatalf("a flood body of %d bytes is over --max-body", len(b))
		}
	}
	return [][]byte{files, stdin}
}

// 72 callers (--concurrency 8 + --queue 64, the defaults) send a body of
// --max-body 16M each, at once. The server read each into a json.Decoder
// buffer that doubles as it fills, decoded it into strings, decoded the
// files' base64 again to check them and marshalled the job once more for
// the jail: several copies of every body at once, in the server, outside
// any jail's cgroup (3.2-4.5 GiB of RSS for 1.1 GiB of bodies). The
// server's peak RSS must stay within the figure the docs state.
func TestAttackBodyFloodMultipliesServerMemory(t *testing.T) {
	s := startServer(t, "--pool", "0")
	pid := s.cmd.Process.Pid
	before := vmHWMKiB(t, pid)
	bodies := floodBodies(t)
	const callers = 72
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	var odd []string
	start := time.Now()
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", "http://stockade/v1/run", bytes.NewReader(bodies[i%2]))
			req.Header.Set("Content-Type", "application/json")
			status, out := 0, ""
			if resp, err := s.hc.Do(req); err != nil {
				out = err.Error()
			} else {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				status, out = resp.StatusCode, string(b)
			}
			mu.Lock()
			defer mu.Unlock()
			statuses[status]++
			if status != 200 && status != 503 || status == 200 && !strings.Contains(out, `"verdict":"ok"`) {
				odd = append(odd, fmt.Sprintf("%d %.300s", status, out))
			}
		}()
	}
	wg.Wait()
	peak := vmHWMKiB(t, pid)
	t.Logf("%d bodies of 16 MiB at once in %v: statuses %v; server VmHWM %d MiB before, %d MiB after",
		callers, time.Since(start).Round(time.Millisecond), statuses, before>>10, peak>>10)
	if len(odd) > 0 {
		t.Errorf("%d answers neither a run nor 503 busy; first: %s", len(odd), odd[0])
	}
	if statuses[200] == 0 {
		t.Errorf("no run served during the flood: %v", statuses)
	}
	// The bodies held at once are bounded by --body-budget 128M, each held
	// once (its strings share its memory: TestDecodeRequestSharesTheBody);
	// the garbage collector lets the heap grow to about twice what it found
	// live (GOGC=100), and the server has its own: 3 x the budget in all
	// (measured 218-286 MiB). Before: 1.7 GiB here (408s cut it short),
	// 3.2-4.5 GiB as first measured.
	const limitMiB = 3 * 128
	if peak>>10 > limitMiB {
		t.Errorf("the server's peak RSS reached %d MiB for %d bodies of 16 MiB; the bound is %d MiB", peak>>10, callers, limitMiB)
	}
}
