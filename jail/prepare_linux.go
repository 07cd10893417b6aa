package jail

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"
)

// Prepared is a jail set up ahead of its run: namespaces, cgroup and its
// limits, mounts, privileges dropped, seccomp loaded and the payload
// started, typically an interpreter blocked reading its program from the
// stdin pipe its caller holds. Its clock has not started: Start starts
// it. A Prepared is used once and then closed, never reused.
type Prepared struct {
	spec Spec
	st   Streams
	res  *Result

	own            *ownership
	id             identity  // the jail user's host ids (WorkOwner)
	seen           workSeen  // a --workdir as the run found it
	deadline       time.Time // when the run's time is up: its start plus its timeout
	dir            *runDir
	pump           *stdinPump
	cg             *runCgroup
	net            *runNetwork
	sv             *supervision
	stdout, stderr *capture
	drained        chan struct{}
	files          []*os.File
	trace          *phaseTrace // nil unless Host.TracePhases

	started, closed bool
	ended           bool // collected during set-up: Start has nothing to wait for
}

// Prepare sets up spec's jail and starts its payload, then returns without
// waiting for it: the wall-clock timeout and the CPU-time limit start with
// Start. ctx bounds the set-up only. st.Stdout and st.Stderr receive output
// as it comes unless Start names other writers. Prepare fails, leaving
// nothing behind, if the jail cannot be set up (see FailedResult).
func Prepare(ctx context.Context, spec Spec, st Streams) (*Prepared, error) {
	p := &Prepared{spec: spec, st: st, res: newResult(spec), trace: newPhaseTrace(spec.Host.TracePhases)}
	p.trace.mark("prepare")
	if err := p.prepare(ctx); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// Done is closed when the jail's init has ended: a prepared jail that died
// while waiting must not be started.
func (p *Prepared) Done() <-chan struct{} { return p.sv.exited }

// Workdir is a host path of the jail's /work when it is a fresh one (""
// otherwise): the tmpfs, reached through stockade's own fd of it
// (/proc/self/fd/N/.), valid in this process only. After Start returns the
// jail is gone and the tmpfs holds what the run left there, until Close
// releases it (with StartOptions.AtExit, init may still be exiting, alone:
// nothing of the jail's writes there any more); read it without following
// symlinks, since the jail made them.
func (p *Prepared) Workdir() string {
	if p.spec.Workdir != "" || p.sv == nil {
		return ""
	}
	fd, ok := p.sv.work.root()
	if !ok {
		return ""
	}
	return "/proc/self/fd/" + strconv.Itoa(fd) + "/."
}

// StartOptions is what a run may still choose once its jail is prepared.
type StartOptions struct {
	Stdout, Stderr io.Writer     // nil: those given to Prepare
	Timeout        time.Duration // 0 or longer than the spec's: the spec's
	// Lifetime, when not 0, replaces the timeout outright, longer or
	// shorter: a server session's jail lives through many requests, each
	// with a timeout its caller applies. A spec with a CPU-time limit is
	// still held to it over the whole lifetime.
	Lifetime time.Duration
	// AtExit lets Start return as soon as the payload has exited and its
	// output is drained, when nothing else of the jail is left running:
	// the cgroup is read then, and init's reaping and the removal of the
	// cgroup and run directory are left to Close (see atexit_linux.go). A
	// run with a host directory at /work waits for all of it, as its
	// copy-back must.
	AtExit bool
}

// Start starts the run's clock and waits for the jail to end, killing it
// on timeout, CPU time or ctx's cancellation. Output goes to the writers
// from now on (with what came before). The Result and error are Run's.
func (p *Prepared) Start(ctx context.Context, o StartOptions) (*Result, error) {
	if p.started || p.closed {
		return nil, errors.New("jail: a prepared jail is started once")
	}
	p.started = true
	p.trace.mark("start")
	if p.ended {
		return p.res, nil
	}
	if o.Stdout != nil {
		p.stdout.setStream(o.Stdout)
	}
	if o.Stderr != nil {
		p.stderr.setStream(o.Stderr)
	}
	spec := p.spec
	if o.Timeout > 0 && o.Timeout < spec.Timeout {
		spec.Timeout = o.Timeout
	}
	if o.Lifetime > 0 {
		spec.Timeout = o.Lifetime
	}
	// The result says what this run is held to: a shorter timeout chosen
	// now is the one that kills it.
	p.res.Limits = LimitsOf(spec)
	p.sv.supervise(ctx, spec, o.AtExit && spec.Workdir == "")
	if p.sv.atExit {
		p.trace.mark("payload exited, init alone")
	} else {
		p.trace.mark("init reaped")
	}
	p.deadline = p.sv.clock.Add(spec.Timeout)
	err := p.collect()
	if err != nil {
		setError(p.res, err)
	}
	return p.res, err
}

// Close kills the jail if it never started, and removes everything it
// held on the host: processes, cgroup, run directory, pipes, its run lock.
// It is safe to call more than once. An error names a cgroup or run
// directory it could not remove; that stays recorded, for Sweep or the
// next run's start to remove.
func (p *Prepared) Close() error {
	if p.closed {
		return nil
	}
	p.closed = true
	p.trace.mark("close")
	if !p.started && !p.ended && p.sv != nil {
		p.sv.kill()
		p.sv.finish()
		<-p.drained
		<-p.drained
	}
	if p.pump != nil {
		p.pump.stop()
	}
	if p.sv != nil {
		p.sv.reapAtClose()
		p.sv.work.close() // the /work tmpfs, charged to the cgroup
	}
	if p.net != nil {
		p.net.close()
	}
	// Never silent: a cgroup left behind holds the parent's controllers, a
	// run directory the host's disk. Either stays recorded in the run's
	// lock slot for a sweep (Sweep, or the next run's start).
	var cgErr, dirErr error
	p.trace.mark("remove the cgroup")
	if p.cg != nil {
		// A no-op once finish has removed it.
		if cgErr = p.cg.close(p.st.Notices); cgErr != nil {
			p.leftover(cgErr)
		}
	}
	for _, f := range p.files {
		f.Close()
	}
	p.trace.mark("remove the run directory")
	if p.dir != nil {
		if dirErr = p.dir.remove(); dirErr != nil {
			p.leftover(dirErr)
		}
	}
	p.trace.mark("release the run lock")
	if p.own != nil {
		p.own.release(p.st.Notices)
	}
	p.trace.mark("closed")
	p.res.Phases = p.trace.phases()
	return errors.Join(cgErr, dirErr)
}

// leftover notes something of the run that Close could not remove.
func (p *Prepared) leftover(err error) {
	if p.own != nil {
		p.own.leftovers = true
	}
	if p.st.Notices != nil {
		fmt.Fprintf(p.st.Notices, "stockade: %v\n", err)
	}
}
