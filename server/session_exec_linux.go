package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"time"

	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/server/internal/kernel"
	"golang.org/x/sys/unix"
)

// execFacts are what an exec's verdict is decided from, each gathered
// where it is known: the driver's answer (checked), the host's timers and
// signals, the cgroup, the output drains.
type execFacts struct {
	OOMKilled   bool // the kernel OOM-killed a process of the session during the exec
	Broken      bool // the driver's channel broke, or the server failed the exec
	TimedOut    bool // the server interrupted it at its timeout or CPU time
	Interrupted bool // the server interrupted it for its caller
	JailEnded   bool // the session's jail ended during the exec
	Answered    bool // the driver answered, with this exec's token
	Exception   bool // the answer says the cell raised
	OutputCut   bool
}

// verdict is the one place the precedence of an exec's verdicts lives,
// in the order of the ExecVerdict constants: what the caller has to fix
// first. An OOM kill is "memory" whatever else happened; an exec whose
// KeyboardInterrupt was answered is "timeout" or "interrupted", not the
// KeyboardInterrupt "exception" the answer reports.
func (f execFacts) verdict() ExecVerdict {
	switch {
	case f.OOMKilled:
		return ExecMemory
	case f.Broken:
		return ExecFailed
	case f.TimedOut:
		return ExecTimeout
	case f.Interrupted:
		return ExecInterrupted
	case f.JailEnded || !f.Answered:
		return ExecKilled
	case f.OutputCut:
		return ExecOutput
	case f.Exception:
		return ExecException
	}
	return ExecOK
}

// state says whether the session's Python state survived: only when the
// driver answered and the session lives on. Nothing else proves it did.
func (f execFacts) state() string {
	if f.Answered && !f.JailEnded && !f.Broken {
		return "kept"
	}
	return "lost"
}

// execPlan is one exec, as the handler checked it.
type execPlan struct {
	code    string
	stdin   string
	timeout time.Duration
	files   map[string]string
	// figureFormats are the figures' formats among the results (nil: png).
	figureFormats []string
	env           map[string]string // this exec's alone (checkExecEnv)
	caller        peer
}

// exec runs one cell. The caller holds the session's slot. out, when not
// nil, streams the cell's output. It returns an apiError when the exec
// could not begin (its files could not be written, the session ended).
func (s *session) exec(ctx context.Context, srv *Server, plan execPlan, out *ndjson) (*ExecResult, *apiError) {
	s.useMu.RLock()
	defer s.useMu.RUnlock()
	if s.released || !s.alive() {
		return nil, s.goneError()
	}
	if len(plan.files) > 0 {
		if s.workFD < 0 {
			return nil, badRequest("files: profile %s has no writable /work", s.profile)
		}
		uid, gid := s.jl.p.WorkOwner()
		for p, b64 := range plan.files {
			data, _ := base64.StdEncoding.DecodeString(b64) // checked by the handler
			if _, err := writeWorkFile(s.workFD, p, bytes.NewReader(data), uid, gid); err != nil {
				return nil, workError("files: "+p, err)
			}
		}
	}
	interrupt := make(chan struct{})
	s.mu.Lock()
	s.busy = true
	s.count++
	n := s.count
	s.interrupt = interrupt
	s.lastUsed = time.Now()
	s.mu.Unlock()
	if srv.cfg.AuditRequired {
		// No cell reaches the interpreter without its line.
		if err := srv.writeAudit(execAudit("exec_start", plan.caller, s, plan.code, len(plan.files), n, plan.timeout)); err != nil {
			s.mu.Lock()
			s.busy, s.interrupt = false, nil
			s.count--
			s.mu.Unlock()
			return nil, &apiError{Status: 503, Msg: fmt.Sprintf("the exec was not started: its audit line could not be written (--audit-required): %v", err)}
		}
	}
	defer func() {
		s.mu.Lock()
		s.busy, s.interrupt, s.lastUsed = false, nil, time.Now()
		s.mu.Unlock()
	}()

	res := &ExecResult{ExecutionCount: n, Images: []Image{}, Results: []RichResult{}, FilesChanged: FSNames{},
		BlockedSyscalls: []jail.BlockedSyscall{}, Network: []jail.NetworkDecision{}}
	var f execFacts
	before, berr := s.jl.p.Usage()
	peakReset := berr == nil && s.jl.p.ResetMemoryPeak() == nil
	// files_changed is what /work holds with a ctime from here on: one
	// walk, after the exec. The files the request wrote just before are
	// not the exec's: the clock is let tick past them.
	since := workClock(len(plan.files) > 0)

	if out != nil {
		// The exec begins: from here its answer is a 200 stream.
		out.begin()
	}
	t0 := time.Now()
	answer, why := s.runCell(ctx, srv, plan, n, interrupt, out, res, &f)
	res.WallMs = ms(time.Since(t0))

	// What the exec used: the cgroup's counters and the supervisor's
	// lists, around it; once the jail has ended, its final result.
	after, aerr := s.jl.p.Usage()
	if aerr != nil {
		<-s.jailDone
		s.mu.Lock()
		fin := s.final
		s.mu.Unlock()
		f.JailEnded = true
		f.Broken = f.Broken || kernel.ChannelLost(fin)
		after = jail.Usage{CPU: time.Duration(fin.CPUMs * float64(time.Millisecond)), MemoryPeakBytes: fin.PeakMemoryBytes,
			Blocked: fin.BlockedSyscalls, Network: fin.Network}
		if fin.Verdict == jail.VerdictMemory {
			f.OOMKilled = true
		}
	} else if after.OOMKills > before.OOMKills {
		f.OOMKilled = true
	}
	if berr == nil {
		res.CPUMs = ms(after.CPU - before.CPU)
		res.BlockedSyscalls = blockedSince(before.Blocked, after.Blocked)
		res.Network = networkSince(before.Network, after.Network)
	}
	res.Stderr = withNetworkNotices(res.Stderr, res.Network, s.noNetwork, out)
	res.PeakMemoryBytes = after.MemoryPeakBytes
	if !peakReset {
		s.mu.Lock()
		res.PeakMemoryBytes = max(res.PeakMemoryBytes, s.peakMem)
		s.mu.Unlock()
	}
	s.mu.Lock()
	s.peakMem = max(s.peakMem, res.PeakMemoryBytes)
	s.mu.Unlock()
	res.FilesChanged, res.FilesChangedTruncated = changedInWork(s.workFD, since, workWalkLimits)

	if answer != nil {
		// Already cut to the caps as it was read (driverConn.readAnswer).
		res.Result, res.ResultTruncated, res.Error = answer.Result, answer.ResultTruncated, answer.Error
		res.ImagesTruncated = answer.ImagesTruncated || answer.Images.Cut
		// The decoder held them to the caps (answerCaps.results).
		res.Results, res.ResultsTruncated = answer.Results.List, answer.Results.Cut || answer.ResultsTruncated
		for _, img := range answer.Images.PNGs {
			res.Images = append(res.Images, Image{Type: "png", Data: img})
		}
	}
	res.Verdict, res.State = f.verdict(), f.state()
	res.Why = explainExec(res, f, why, s)
	if res.State == "lost" && s.alive() {
		// Never a session that looks alive after its state was lost.
		s.finish(SessionFailed, res.Why)
	}
	res.Session = s.state()
	return res, nil
}

// runCell sends the cell to the driver and waits for its answer, the
// jail's end, or the timeout, CPU time, interrupt or caller's departure
// (each a KeyboardInterrupt, then after interruptGrace the session's
// kill). It fills in the output and the facts; why says what ended it.
func (s *session) runCell(ctx context.Context, srv *Server, plan execPlan, n int, interrupt <-chan struct{}, out *ndjson, res *ExecResult, f *execFacts) (*driverAnswer, string) {
	inR, inW, err1 := os.Pipe()
	outR, outW, err2 := os.Pipe()
	errR, errW, err3 := os.Pipe()
	if err := errors.Join(err1, err2, err3); err != nil {
		for _, p := range []*os.File{inR, inW, outR, outW, errR, errW} {
			if p != nil {
				p.Close()
			}
		}
		f.Broken = true
		return nil, fmt.Sprintf("the server could not make the exec's pipes: %v", err)
	}
	var wout, werr *streamWriter
	if out != nil {
		wout, werr = out.stream("stdout"), out.stream("stderr")
	}
	var sout, serr io.Writer // nil interfaces, not nil *streamWriters
	if wout != nil {
		sout, serr = wout, werr
	}
	drain := s.jl.p.DrainOutput(outR, errR, s.outputLimit, sout, serr)
	// The inbox opens before the request goes: the driver's first frame
	// may come before send returns.
	inbox := s.openInbox()
	defer s.closeInbox()
	token := newID()
	req := kernel.Request{Op: "exec", Token: token, Code: plan.code, N: n, ResultMax: resultMax(s.outputLimit), ImagesMax: srv.cfg.FilesMax,
		Rich: richCapsOf(srv.cfg.FilesMax, plan.figureFormats), Env: plan.env}
	sendErr := s.conn.Send(req, []*os.File{inR, outW, errW}, time.Now().Add(plan.timeout))
	inR.Close()
	outW.Close()
	errW.Close()
	go func() {
		// A cell that never reads its stdin leaves this blocked until
		// inW is closed below.
		if plan.stdin != "" {
			_, _ = inW.WriteString(plan.stdin)
		}
		inW.Close()
	}()
	defer inW.Close()

	var answer *driverAnswer
	why := ""
	finishOutput := func(wait time.Duration) {
		o := drain.Finish(wait)
		if wout != nil {
			wout.flush()
			werr.flush()
		}
		res.Stdout, res.Stderr = o.Stdout, o.Stderr
		res.StdoutBytes, res.StderrBytes = o.StdoutBytes, o.StderrBytes
		res.StdoutTruncated, res.StderrTruncated = o.StdoutTruncated, o.StderrTruncated
		f.OutputCut = o.StdoutTruncated || o.StderrTruncated
	}
	if sendErr != nil {
		f.Broken = true
		s.finish(SessionFailed, fmt.Sprintf("the driver did not take exec %d: %v", n, sendErr))
		<-s.jailDone
		finishOutput(0)
		return nil, s.ended().Why
	}

	timer := time.NewTimer(plan.timeout)
	defer timer.Stop()
	var cpuTick <-chan time.Time
	if s.execCPU > 0 {
		t := time.NewTicker(max(min(s.execCPU/20, 100*time.Millisecond), 10*time.Millisecond))
		defer t.Stop()
		cpuTick = t.C
	}
	cpu0, _ := s.jl.p.Usage()
	var grace <-chan time.Time
	// interrupt is this exec's own channel, made before the cell was
	// sent: read back from the session here, after the send, it could
	// already be nil, an interrupt that came as the cell printed its first
	// line taken and lost (the exec then ran to its timeout).
	done := ctx.Done()
	// sigint asks the cell to stop, once, and starts the grace. The signal
	// itself waits for the driver's word that the cell runs: before it,
	// the driver would drop it as a late one.
	started, pending := false, false
	sigint := func(reason string) {
		if grace != nil {
			return
		}
		why = reason
		grace = time.After(interruptGrace)
		pending = true
		if started {
			_ = s.proc.Signal(unix.SIGINT)
			pending = false
		}
	}
wait:
	for {
		select {
		case fr := <-inbox:
			if fr.err == nil && fr.answer.Started != "" && !started {
				if fr.answer.Started != token {
					f.Broken = true
					why = fmt.Sprintf("exec %d: a frame on the driver's channel that is not the driver's: the cell wrote to the channel", n)
					s.finish(SessionFailed, why)
					<-s.jailDone
					break wait
				}
				started = true
				if pending {
					_ = s.proc.Signal(unix.SIGINT)
					pending = false
				}
				continue
			}
			if fr.err != nil {
				// The jail's death closes the channel too; its end, if it
				// comes at once, is the reason.
				select {
				case <-s.jailDone:
					break wait
				case <-time.After(time.Second):
				}
				f.Broken = true
				why = fmt.Sprintf("the driver's channel broke during exec %d (%v): the cell closed or wrote to it", n, fr.err)
				s.finish(SessionFailed, why)
				<-s.jailDone
				break wait
			}
			if fr.answer.Token != token || (fr.answer.Status != "ok" && fr.answer.Status != "exception") {
				f.Broken = true
				why = fmt.Sprintf("exec %d: a frame on the driver's channel that is not the driver's answer to it: the cell wrote to the channel", n)
				s.finish(SessionFailed, why)
				<-s.jailDone
				break wait
			}
			// The answer is the driver's only if its process is still the
			// program the server started (a cell can exec another in its
			// place, which keeps the pid and the channel).
			if err := s.driverIntact(); err != nil {
				f.Broken = true
				why = fmt.Sprintf("exec %d: %v; the session is ended", n, err)
				s.finish(SessionFailed, why)
				<-s.jailDone
				break wait
			}
			a := fr.answer
			answer = &a
			f.Answered = true
			f.Exception = a.Status == "exception"
			break wait
		case <-s.jailDone:
			// An answer that came just before the end still counts, if
			// its process was still the driver's.
			select {
			case fr := <-inbox:
				if fr.err == nil && fr.answer.Token == token && s.driverIntact() == nil {
					a := fr.answer
					answer = &a
					f.Answered = true
					f.Exception = a.Status == "exception"
				}
			default:
			}
			f.JailEnded = true
			break wait
		case <-timer.C:
			f.TimedOut = true
			sigint(fmt.Sprintf("the exec ran past its timeout of %v", plan.timeout))
		case <-cpuTick:
			if u, err := s.jl.p.Usage(); err == nil && u.CPU-cpu0.CPU >= s.execCPU {
				f.TimedOut = true
				sigint(fmt.Sprintf("the exec used its CPU time of %v", s.execCPU))
				cpuTick = nil
			}
		case <-interrupt:
			f.Interrupted = true
			sigint("interrupted by POST .../interrupt")
			interrupt = nil
		case <-done:
			done = nil
			if srv.runs.Err() != nil {
				// The server is stopping, and every session with it: the
				// state is lost whatever the cell does, and the caller is
				// told so, not that it went away.
				why = fmt.Sprintf("the server is shutting down (%v)", context.Cause(srv.runs))
				s.finish(SessionShutdown, why)
				continue
			}
			f.Interrupted = true
			sigint("the caller went away")
		case <-grace:
			v := SessionTimeout
			if !f.TimedOut {
				v = SessionInterrupted
			}
			why += fmt.Sprintf("; the interpreter did not answer KeyboardInterrupt within %v (a thread blocked in C code, or the signal blocked or ignored), so the session was killed", interruptGrace)
			s.finish(v, why)
			grace = nil
		}
	}
	if f.Answered {
		finishOutput(outputGrace)
	} else {
		finishOutput(0)
	}
	return answer, why
}

// maxResult caps the repr of a cell's last expression, its exception's
// value and its traceback, each, in characters: an answer the server holds
// whole, where output is streamed.
const maxResult = 256 << 10

func resultMax(outputLimit int64) int64 { return min(outputLimit, maxResult) }

// explainExec says, for a verdict other than ok, what happened.
func explainExec(res *ExecResult, f execFacts, why string, s *session) string {
	lost := ""
	if res.State == "lost" {
		lost = ": state lost"
	}
	switch res.Verdict {
	case ExecOK, ExecException:
		return ""
	case ExecMemory:
		if f.JailEnded {
			return fmt.Sprintf("the kernel OOM-killed the interpreter (memory limit %d bytes): the session has ended%s; its /work stays readable until DELETE or expiry", s.limits.MemoryBytes, lost)
		}
		return fmt.Sprintf("the kernel OOM-killed a process of the session (memory limit %d bytes); the interpreter lives on", s.limits.MemoryBytes)
	case ExecTimeout, ExecInterrupted:
		if res.State == "kept" {
			return why + "; KeyboardInterrupt ended it and the interpreter answered: state kept"
		}
		if why == "" {
			why = "interrupted"
		}
		return why + lost
	case ExecOutput:
		return fmt.Sprintf("output past %d bytes per stream was cut", s.outputLimit)
	case ExecKilled:
		if e := s.ended(); e != nil {
			return fmt.Sprintf("the session ended during the exec (%s: %s)%s", e.Verdict, e.Why, lost)
		}
		return "the interpreter did not answer" + lost
	}
	if why == "" {
		why = "the exec failed"
		if e := s.ended(); e != nil {
			why = e.Why
		}
	}
	return why + lost
}

// blockedSince is what after counts that before did not.
func blockedSince(before, after []jail.BlockedSyscall) []jail.BlockedSyscall {
	was := map[string]int{}
	for _, b := range before {
		was[b.Name] = b.Count
	}
	out := []jail.BlockedSyscall{}
	for _, b := range after {
		if d := b.Count - was[b.Name]; d > 0 {
			b.Count = d
			out = append(out, b)
		}
	}
	return out
}

// networkSince is what the network log gained: entries are kept in the
// order they first happened, each counting its repeats.
func networkSince(before, after []jail.NetworkDecision) []jail.NetworkDecision {
	out := []jail.NetworkDecision{}
	for i, d := range after {
		if i < len(before) && before[i].Via == d.Via && before[i].Host == d.Host && before[i].Port == d.Port {
			if d.Count <= before[i].Count {
				continue
			}
			d.Count -= before[i].Count
			d.BytesUp -= before[i].BytesUp
			d.BytesDown -= before[i].BytesDown
		}
		out = append(out, d)
	}
	return out
}

// workPathOf cleans the path of a files route: "" and "." are /work.
func workPathOf(p string) string {
	if p == "" {
		return "."
	}
	return path.Clean(p)
}
