package gateway

import (
	"io"
	"sync"
	"sync/atomic"

	"github.com/stockade/stockade/internal/auditline"
)

// auditWriter is the audit log as the gateway writes it, one JSON line a
// Write: a line that cannot be written (a full disk, a closed stderr) is
// counted (stockade_gateway_audit_lost_lines_total) and said in the
// gateway's log when the writes start failing and when they work again,
// not once a line. A line cut short mid-way leaves the file ending
// mid-line, so the next one begins with a newline: one torn line, never
// two run together. (`stockade serve`'s audit log does the same.)
type auditWriter struct {
	mu      sync.Mutex
	w       io.Writer
	logf    func(format string, a ...any)
	torn    bool // the last write was cut short mid-line
	failing bool // the last write failed
	lost    atomic.Int64
}

func (a *auditWriter) Write(line []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var err error
	a.torn, err = auditline.Write(a.w, line, a.torn)
	switch {
	case err != nil:
		lost := a.lost.Add(1)
		if !a.failing {
			a.logf("audit log: a line could not be written: %v; the lines to come are counted in stockade_gateway_audit_lost_lines_total (%d so far) until a write works again", err, lost)
		}
	case a.failing:
		a.logf("audit log: written again (%d lines lost since the start)", a.lost.Load())
	}
	a.failing = err != nil
	if err != nil {
		return 0, err
	}
	return len(line), nil
}
