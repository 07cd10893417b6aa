package mcp

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// A client that sends a progressToken with run_python gets
// notifications/progress while the code runs: the output as it comes (the
// message), and a beat every progressBeat while it prints nothing, so a
// host can show a long cell is alive and a client's own timeout, reset by
// progress, does not end it. The whole output still comes in the result;
// the notifications are a view of it, bounded and never waited for.

const (
	// progressEvery is the least time between two notifications: a cell
	// printing in a tight loop makes one notification per interval, not
	// one per line.
	progressEvery = 250 * time.Millisecond
	// progressBeat is how often a silent cell is said to be running.
	progressBeat = 5 * time.Second
	// maxProgressText bounds one notification's message; output past it
	// in one interval is counted, not sent.
	maxProgressText = 4 << 10
)

// progress sends one call's notifications, from a goroutine of its own:
// output (called by the backend as the stream is read) only appends under
// a lock, so a client slow to read its notifications never slows the
// stream, which the server would cancel.
type progress struct {
	ctx     context.Context
	session *sdk.ServerSession
	token   any
	t0      time.Time

	mu      sync.Mutex
	pending strings.Builder
	dropped int
	bytes   int
	wake    chan struct{}
	done    chan struct{}
	stopped chan struct{}
}

func startProgress(ctx context.Context, ss *sdk.ServerSession, token any) *progress {
	p := &progress{ctx: ctx, session: ss, token: token, t0: time.Now(),
		wake: make(chan struct{}, 1), done: make(chan struct{}), stopped: make(chan struct{})}
	go p.run()
	return p
}

// output takes a chunk of the program's output; stderr is marked so.
func (p *progress) output(stream, text string) {
	p.mu.Lock()
	p.bytes += len(text)
	if stream == "stderr" {
		text = "[stderr] " + text
	}
	if room := maxProgressText - p.pending.Len(); len(text) > room {
		keep := max(room, 0)
		for keep > 0 && !utf8.RuneStart(text[keep]) {
			keep--
		}
		p.dropped += len(text) - keep
		text = text[:keep]
	}
	p.pending.WriteString(text)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// stop ends the notifications: none is begun after it returns, so none
// follows the call's result. One being written to a client that does not
// read is not waited for past a second: the result waits on the same
// transport anyway.
func (p *progress) stop() {
	close(p.done)
	select {
	case <-p.stopped:
	case <-time.After(time.Second):
	}
}

func (p *progress) run() {
	defer close(p.stopped)
	beat := time.NewTicker(progressBeat)
	defer beat.Stop()
	last := 0.0
	for {
		select {
		case <-p.done:
			return
		case <-p.ctx.Done():
			return
		case <-p.wake:
		case <-beat.C:
		}
		p.mu.Lock()
		msg, dropped, total := p.pending.String(), p.dropped, p.bytes
		p.pending.Reset()
		p.dropped = 0
		p.mu.Unlock()
		elapsed := time.Since(p.t0)
		switch {
		case msg == "" && dropped == 0:
			msg = fmt.Sprintf("running for %ds, %d bytes of output so far", int(elapsed.Seconds()), total)
		case dropped > 0:
			msg += fmt.Sprintf("\n[... %d bytes more: the result has the whole output]", dropped)
		}
		// Progress only grows: seconds since the call began, to the
		// millisecond, and never the same twice.
		now := max(float64(elapsed.Milliseconds())/1000, last+0.001)
		last = now
		// A client that does not read holds this goroutine only: the
		// notification waits at most progressEvery.
		ctx, cancel := context.WithTimeout(p.ctx, progressEvery)
		err := p.session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: p.token, Progress: now, Message: msg})
		cancel()
		if err != nil {
			return // the transport cannot carry them (a JSON-only answer): no more
		}
		select {
		case <-p.done:
			return
		case <-time.After(progressEvery):
		}
	}
}
