package jail

import "time"

// collect waits for the output and fills in the Result once init has been
// reaped (or, atExit, the payload has exited alone), copies a --workdir's
// writes back, then reads the run's cgroup and removes it (atExit: Close
// does, once init is reaped).
func (p *Prepared) collect() error {
	<-p.drained
	<-p.drained
	p.trace.mark("output drained")
	res, sv, cg := p.res, p.sv, p.cg
	// Init is reaped: no connection can come any more, and the proxy's
	// open tunnels end with the jail.
	p.net.close()
	res.Network = p.net.decisions()
	res.Stdout, res.Stderr = p.stdout.buf.String(), p.stderr.buf.String()
	res.StdoutBytes, res.StderrBytes = p.stdout.total, p.stderr.total
	res.StdoutTruncated, res.StderrTruncated = p.stdout.truncated(), p.stderr.truncated()
	var end ending
	err := sv.result(res, &end)
	if fd, ok := sv.work.root(); ok && p.spec.Workdir != "" {
		// The jail is gone: nothing writes the upper layer any more. The
		// copy counts against the run's time: it may take what --timeout
		// left of it (copyBackGrace at least).
		p.trace.mark("copy /work back")
		cb, cerr := copyBack(fd, p.spec.Workdir, p.seen, copyBackLimitsFor(p.spec, p.deadline, time.Now()))
		res.CopyBack, res.CopyBackMs = cb, cb.Ms
		if cerr != nil && err == nil {
			err = setupError("copy /work back", cerr)
		}
	}
	res.WorkPeakBytes, res.WorkPeakInodes = sv.work.last()
	end.DiskFull = sv.work.full
	p.trace.mark("read the cgroup")
	if cg != nil {
		if cerr := cg.finish(res, &end, !sv.atExit); cerr != nil && err == nil {
			err = setupError("cgroup", cerr)
		}
	}
	if err != nil {
		return err // Run makes the verdict "error"
	}
	res.Verdict = end.verdict()
	return nil
}
