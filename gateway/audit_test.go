package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// fullDisk is a file on a file system with room bytes left: a write
// past it goes in as far as the room and fails ENOSPC.
type fullDisk struct {
	mu     sync.Mutex
	room   int
	data   bytes.Buffer
	failed int
}

func (d *fullDisk) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := min(len(p), d.room)
	d.data.Write(p[:n])
	d.room -= n
	if n < len(p) {
		d.failed++
		return n, syscall.ENOSPC
	}
	return n, nil
}

func (d *fullDisk) free(n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.room += n
}

// The gateway's audit log on a disk that fills: the lines that cannot be
// written are counted in the metrics and said in the gateway's log once
// when the writes start failing and once when they work again (they were
// lost without a word); the line cut short mid-way is followed by a
// newline, so every other line of the file is whole JSON.
func TestAuditLogOnAFullDiskIsNoSilentLoss(t *testing.T) {
	disk := &fullDisk{room: 700} // a line or two, then part of one
	var logMu sync.Mutex
	var logged []string
	tg := startGateway(t, func(c *Config) {
		c.Audit = disk
		c.Logf = func(format string, a ...any) {
			logMu.Lock()
			defer logMu.Unlock()
			logged = append(logged, fmt.Sprintf(format, a...))
		}
	})
	c := tg.client(t, nil)
	for i := 0; i < 8; i++ {
		tg.do(t, c, "GET", "/v1/sessions", fmt.Sprintf("bad-token-%d", i), "", nil)
	}
	disk.mu.Lock()
	failed := disk.failed
	disk.mu.Unlock()
	if failed < 2 {
		t.Fatalf("the disk refused %d lines; the test needs a full disk", failed)
	}
	if got := tg.g.auditW.lost.Load(); got != int64(failed) {
		t.Fatalf("lost lines counted: %d, the disk refused %d", got, failed)
	}
	disk.free(1 << 20)
	code, body := tg.do(t, c, "GET", "/v1/metrics", tokenOps, "", nil)
	if want := fmt.Sprintf("stockade_gateway_audit_lost_lines_total %d\n", failed); code != 200 || !strings.Contains(body, want) {
		t.Fatalf("metrics: %d, want %q in\n%s", code, want, body)
	}
	logMu.Lock()
	log := strings.Join(logged, "\n")
	logMu.Unlock()
	if strings.Count(log, "could not be written") != 1 || strings.Count(log, "written again") != 1 || !strings.Contains(log, "no space left on device") {
		t.Fatalf("the gateway's log of the full disk:\n%s", log)
	}
	// The file: whole JSON lines, one torn line at most, never two run
	// together; the line after the space came back is whole.
	lines := strings.Split(strings.TrimSuffix(disk.data.String(), "\n"), "\n")
	torn := 0
	for _, l := range lines {
		var v map[string]any
		if json.Unmarshal([]byte(l), &v) != nil {
			torn++
			if strings.Count(l, `"msg":"request"`) > 1 {
				t.Fatalf("two lines run together: %q", l)
			}
		}
	}
	if torn > 1 || !json.Valid([]byte(lines[len(lines)-1])) {
		t.Fatalf("%d torn lines, last %q; the file:\n%s", torn, lines[len(lines)-1], disk.data.String())
	}
}
