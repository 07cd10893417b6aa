package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"path"
	"time"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/server/internal/kernel"
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
// in the order of api's Exec constants: what the caller has to fix
// first. An OOM kill is "memory" whatever else happened; an exec whose
// KeyboardInterrupt was answered is "timeout" or "interrupted", not the
// KeyboardInterrupt "exception" the answer reports.
func (f execFacts) verdict() api.Verdict {
	switch {
	case f.OOMKilled:
		return api.ExecMemory
	case f.Broken:
		return api.ExecFailed
	case f.TimedOut:
		return api.ExecTimeout
	case f.Interrupted:
		return api.ExecInterrupted
	case f.JailEnded || !f.Answered:
		return api.ExecKilled
	case f.OutputCut:
		return api.ExecOutput
	case f.Exception:
		return api.ExecException
	}
	return api.ExecOK
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
func (s *session) exec(ctx context.Context, srv *Server, plan execPlan, out *ndjson) (*api.ExecResult, *api.Error) {
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
			return nil, &api.Error{Status: 503, Msg: fmt.Sprintf("the exec was not started: its audit line could not be written (--audit-required): %v", err)}
		}
	}
	defer func() {
		s.mu.Lock()
		s.busy, s.interrupt, s.lastUsed = false, nil, time.Now()
		s.mu.Unlock()
	}()

	res := &api.ExecResult{ExecutionCount: n, Images: []api.Image{}, Results: []api.RichResult{}, FilesChanged: api.FSNames{},
		BlockedSyscalls: []jail.BlockedSyscall{}, Network: []jail.NetworkDecision{}}
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
	c := &cell{s: s, srv: srv, plan: plan, n: n, token: newID(), res: res}
	c.run(ctx, interrupt, out)
	answer, why, f := c.answer, c.why, c.facts
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
			res.Images = append(res.Images, api.Image{Type: "png", Data: img})
		}
	}
	res.Verdict, res.State = f.verdict(), f.state()
	res.Why = explainExec(res, f, why, s)
	if res.State == "lost" && s.alive() {
		// Never a session that looks alive after its state was lost.
		s.finish(api.SessionFailed, res.Why)
	}
	res.Session = s.state()
	return res, nil
}

// maxResult caps the repr of a cell's last expression, its exception's
// value and its traceback, each, in characters: an answer the server holds
// whole, where output is streamed.
const maxResult = 256 << 10

func resultMax(outputLimit int64) int64 { return min(outputLimit, maxResult) }

// explainExec says, for a verdict other than ok, what happened.
func explainExec(res *api.ExecResult, f execFacts, why string, s *session) string {
	lost := ""
	if res.State == "lost" {
		lost = ": state lost"
	}
	switch res.Verdict {
	case api.ExecOK, api.ExecException:
		return ""
	case api.ExecMemory:
		if f.JailEnded {
			return fmt.Sprintf("the kernel OOM-killed the interpreter (memory limit %d bytes): the session has ended%s; its /work stays readable until DELETE or expiry", s.limits.MemoryBytes, lost)
		}
		return fmt.Sprintf("the kernel OOM-killed a process of the session (memory limit %d bytes); the interpreter lives on", s.limits.MemoryBytes)
	case api.ExecTimeout, api.ExecInterrupted:
		if res.State == "kept" {
			return why + "; KeyboardInterrupt ended it and the interpreter answered: state kept"
		}
		if why == "" {
			why = "interrupted"
		}
		return why + lost
	case api.ExecOutput:
		return fmt.Sprintf("output past %d bytes per stream was cut", s.outputLimit)
	case api.ExecKilled:
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
