package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/stockade/stockade/api"

	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/server/internal/kernel"
	"golang.org/x/sys/unix"
)

// cell is one exec on its way through the driver: what was sent, what
// the driver and the host have said since, and the facts the verdict is
// decided from. Its methods are the steps of the exec, each one event of
// the wait, so that no step takes a parameter or hands one back.
type cell struct {
	s     *session
	srv   *Server
	plan  execPlan
	n     int    // the execution count
	token string // the driver's answer must carry it
	res   *api.ExecResult
	facts execFacts
	// answer is the driver's, checked (nil: none came); why says what
	// ended the exec, when not the answer.
	answer *driverAnswer
	why    string

	drain      *jail.ExecOutput
	wout, werr *streamWriter // nil when not streamed
	inbox      chan driverFrame
	stdin      *os.File // the cell's stdin, closed at the exec's end
	// started is the driver's word that the cell runs; pending, an
	// interrupt waiting for it; grace, the time the interpreter has left
	// to answer one.
	started, pending bool
	grace            <-chan time.Time
}

// run sends the cell to the driver and waits for its answer, the jail's
// end, or the timeout, CPU time, interrupt or caller's departure (each a
// KeyboardInterrupt, then after interruptGrace the session's kill). It
// fills in the result's output; the cell's facts say what happened.
func (c *cell) run(ctx context.Context, interrupt <-chan struct{}, out *ndjson) {
	s := c.s
	if out != nil {
		c.wout, c.werr = out.stream("stdout"), out.stream("stderr")
	}
	if c.send() {
		c.wait(ctx, interrupt)
	}
	if c.facts.Answered {
		c.finishOutput(outputGrace)
	} else {
		c.finishOutput(0)
	}
	if c.stdin != nil {
		c.stdin.Close()
	}
	if c.inbox != nil {
		s.closeInbox()
	}
}

// send makes the cell's pipes, drains its output and sends the request
// with them; false when the exec could not begin (the facts say why).
func (c *cell) send() bool {
	s := c.s
	inR, inW, err1 := os.Pipe()
	outR, outW, err2 := os.Pipe()
	errR, errW, err3 := os.Pipe()
	if err := errors.Join(err1, err2, err3); err != nil {
		for _, p := range []*os.File{inR, inW, outR, outW, errR, errW} {
			if p != nil {
				p.Close()
			}
		}
		c.facts.Broken = true
		c.why = fmt.Sprintf("the server could not make the exec's pipes: %v", err)
		return false
	}
	var sout, serr io.Writer // nil interfaces, not nil *streamWriters
	if c.wout != nil {
		sout, serr = c.wout, c.werr
	}
	c.drain = s.jl.p.DrainOutput(outR, errR, s.outputLimit, sout, serr)
	// The inbox opens before the request goes: the driver's first frame
	// may come before send returns.
	c.inbox = s.openInbox()
	req := kernel.Request{Op: "exec", Token: c.token, Code: c.plan.code, N: c.n, ResultMax: resultMax(s.outputLimit), ImagesMax: c.srv.cfg.FilesMax,
		Rich: richCapsOf(c.srv.cfg.FilesMax, c.plan.figureFormats), Env: c.plan.env}
	sendErr := s.conn.Send(req, []*os.File{inR, outW, errW}, time.Now().Add(c.plan.timeout))
	inR.Close()
	outW.Close()
	errW.Close()
	go func() {
		// A cell that never reads its stdin leaves this blocked until
		// inW is closed (wait's end).
		if c.plan.stdin != "" {
			_, _ = inW.WriteString(c.plan.stdin)
		}
		inW.Close()
	}()
	c.stdin = inW
	if sendErr != nil {
		c.facts.Broken = true
		s.finish(api.SessionFailed, fmt.Sprintf("the driver did not take exec %d: %v", c.n, sendErr))
		<-s.jailDone
		c.why = s.ended().Why
		return false
	}
	return true
}

// wait waits for the driver's answer, the jail's end, or the timeout,
// CPU time, interrupt or caller's departure.
func (c *cell) wait(ctx context.Context, interrupt <-chan struct{}) {
	s := c.s
	timer := time.NewTimer(c.plan.timeout)
	defer timer.Stop()
	var cpuTick <-chan time.Time
	if s.execCPU > 0 {
		t := time.NewTicker(max(min(s.execCPU/20, 100*time.Millisecond), 10*time.Millisecond))
		defer t.Stop()
		cpuTick = t.C
	}
	cpu0, _ := s.jl.p.Usage()
	// interrupt is this exec's own channel, made before the cell was
	// sent: read back from the session here, after the send, it could
	// already be nil, an interrupt that came as the cell printed its first
	// line taken and lost (the exec then ran to its timeout).
	done := ctx.Done()
	for {
		select {
		case fr := <-c.inbox:
			if c.frame(fr) {
				return
			}
		case <-s.jailDone:
			// An answer that came just before the end still counts, if
			// its process was still the driver's.
			select {
			case fr := <-c.inbox:
				if fr.err == nil && fr.answer.Token == c.token && s.driverIntact() == nil {
					c.take(fr.answer)
				}
			default:
			}
			c.facts.JailEnded = true
			return
		case <-timer.C:
			c.facts.TimedOut = true
			c.sigint(fmt.Sprintf("the exec ran past its timeout of %v", c.plan.timeout))
		case <-cpuTick:
			if u, err := s.jl.p.Usage(); err == nil && u.CPU-cpu0.CPU >= s.execCPU {
				c.facts.TimedOut = true
				c.sigint(fmt.Sprintf("the exec used its CPU time of %v", s.execCPU))
				cpuTick = nil
			}
		case <-interrupt:
			c.facts.Interrupted = true
			c.sigint("interrupted by POST .../interrupt")
			interrupt = nil
		case <-done:
			done = nil
			if c.srv.runs.Err() != nil {
				// The server is stopping, and every session with it: the
				// state is lost whatever the cell does, and the caller is
				// told so, not that it went away.
				c.why = fmt.Sprintf("the server is shutting down (%v)", context.Cause(c.srv.runs))
				s.finish(api.SessionShutdown, c.why)
				continue
			}
			c.facts.Interrupted = true
			c.sigint("the caller went away")
		case <-c.grace:
			v := api.SessionTimeout
			if !c.facts.TimedOut {
				v = api.SessionInterrupted
			}
			c.why += fmt.Sprintf("; the interpreter did not answer KeyboardInterrupt within %v (a thread blocked in C code, or the signal blocked or ignored), so the session was killed", interruptGrace)
			s.finish(v, c.why)
			c.grace = nil
		}
	}
}

// frame takes one frame of the driver's, and says whether the exec is
// over: the answer came, or the channel broke or carried what is not the
// driver's.
func (c *cell) frame(fr driverFrame) bool {
	s := c.s
	if fr.err == nil && fr.answer.Started != "" && !c.started {
		if fr.answer.Started != c.token {
			c.broken(fmt.Sprintf("exec %d: a frame on the driver's channel that is not the driver's: the cell wrote to the channel", c.n))
			return true
		}
		c.started = true
		if c.pending {
			_ = s.proc.Signal(unix.SIGINT)
			c.pending = false
		}
		return false
	}
	if fr.err != nil {
		// A frame the driver did not send (another sender, a bad
		// header) is the cell's doing whatever happens next: said at
		// once, before the session's watch can name the break itself.
		if errors.Is(fr.err, kernel.ErrChannel) {
			c.broken(fmt.Sprintf("exec %d: %v; the session is ended", c.n, fr.err))
			return true
		}
		// The jail's death closes the channel too; its end, if it
		// comes at once, is the reason.
		select {
		case <-s.jailDone:
			return true
		case <-time.After(time.Second):
		}
		c.broken(fmt.Sprintf("the driver's channel broke during exec %d (%v): the cell closed or wrote to it", c.n, fr.err))
		return true
	}
	if fr.answer.Token != c.token || (fr.answer.Status != "ok" && fr.answer.Status != "exception") {
		c.broken(fmt.Sprintf("exec %d: a frame on the driver's channel that is not the driver's answer to it: the cell wrote to the channel", c.n))
		return true
	}
	// The answer is the driver's only if its process is still the
	// program the server started (a cell can exec another in its place,
	// which keeps the pid and the channel).
	if err := s.driverIntact(); err != nil {
		c.broken(fmt.Sprintf("exec %d: %v; the session is ended", c.n, err))
		return true
	}
	c.take(fr.answer)
	return true
}

// take is the driver's answer, checked.
func (c *cell) take(a driverAnswer) {
	c.answer = &a
	c.facts.Answered = true
	c.facts.Exception = a.Status == "exception"
}

// broken ends the session for a channel that is no longer the driver's
// alone, and waits for its jail to end.
func (c *cell) broken(why string) {
	c.facts.Broken = true
	c.why = why
	c.s.finish(api.SessionFailed, why)
	<-c.s.jailDone
}

// sigint asks the cell to stop, once, and starts the grace. The signal
// itself waits for the driver's word that the cell runs: before it, the
// driver would drop it as a late one.
func (c *cell) sigint(reason string) {
	if c.grace != nil {
		return
	}
	c.why = reason
	c.grace = time.After(interruptGrace)
	c.pending = true
	if c.started {
		_ = c.s.proc.Signal(unix.SIGINT)
		c.pending = false
	}
}

// finishOutput ends the output's drain, waiting up to wait for processes
// the cell started to close it, and fills in the result's streams.
func (c *cell) finishOutput(wait time.Duration) {
	if c.drain == nil {
		return
	}
	o := c.drain.Finish(wait)
	if c.wout != nil {
		c.wout.flush()
		c.werr.flush()
	}
	res := c.res
	res.Stdout, res.Stderr = o.Stdout, o.Stderr
	res.StdoutBytes, res.StderrBytes = o.StdoutBytes, o.StderrBytes
	res.StdoutTruncated, res.StderrTruncated = o.StdoutTruncated, o.StderrTruncated
	c.facts.OutputCut = o.StdoutTruncated || o.StderrTruncated
}
