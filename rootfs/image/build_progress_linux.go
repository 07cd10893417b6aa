package image

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// progress writes stage lines with the time since the work began:
//
//	[ 12.3s] debootstrap: Retrieving libc6 2.36-9+deb12u10
//
// On a terminal, chatter (one line per package) overwrites itself in place
// and only stages stay on screen; anywhere else every line is a plain line,
// so that logs keep everything. A nil writer discards everything.
type progress struct {
	mu       sync.Mutex
	w        io.Writer
	start    time.Time
	terminal bool
	dirty    bool // a transient line is on screen
}

func newProgress(w io.Writer) *progress {
	return &progress{w: w, start: time.Now(), terminal: isTerminal(w)}
}

// isTerminal reports whether w is a terminal (by its file descriptor).
func isTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// stage writes a line that stays.
func (p *progress) stage(format string, args ...any) {
	p.line(false, fmt.Sprintf(format, args...))
}

// chatter writes a line that a terminal shows only until the next one.
func (p *progress) chatter(format string, args ...any) {
	p.line(true, fmt.Sprintf(format, args...))
}

func (p *progress) line(transient bool, msg string) {
	if p == nil || p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	msg = strings.TrimRight(msg, "\n")
	text := fmt.Sprintf("[%5.1fs] %s", time.Since(p.start).Seconds(), msg)
	switch {
	case p.terminal && transient:
		// \r and erase-line: redraw in place; cut to a typical width so a
		// long line does not wrap and leave debris.
		if len(text) > 100 {
			text = text[:100]
		}
		fmt.Fprintf(p.w, "\r\033[K%s", text)
		p.dirty = true
	case p.terminal && p.dirty:
		fmt.Fprintf(p.w, "\r\033[K%s\n", text)
		p.dirty = false
	default:
		fmt.Fprintln(p.w, text)
	}
}

// done ends a transient line so that what follows starts on its own line.
func (p *progress) done() {
	if p == nil || p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dirty {
		fmt.Fprint(p.w, "\r\033[K")
		p.dirty = false
	}
}
