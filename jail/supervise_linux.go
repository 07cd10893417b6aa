package jail

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"time"

	"github.com/stockade/stockade/jail/internal/jailinit"
	"github.com/stockade/stockade/seccomp"
	"golang.org/x/sys/unix"
)

// supervision follows one init from start to reaping.
type supervision struct {
	cmd   *exec.Cmd
	sock  int
	begin time.Time

	exited     chan struct{} // closed when init has been reaped
	payloadEnd chan struct{} // closed when init reports the payload's exit
	startedCh  chan struct{} // closed when init reports the payload started
	readerDone chan struct{}
	clock      time.Time // when the run's clock started (supervise)

	mu       sync.Mutex
	started  time.Time
	exit     *jailinit.Msg
	setupErr *jailinit.Msg
	badMsg   error

	filter     *seccomp.Supervisor // answers refused system calls
	filterDone chan struct{}

	cg   *runCgroup
	work workDisk
	// supervisorCPUs bounds what answering refused calls may cost.
	supervisorCPUs float64
	jailCPU        func() (time.Duration, error) // nil: the jail's CPU is not seen

	net     *runNetwork
	proxied bool

	trace *phaseTrace // init's marks join it; nil: not asked

	timedOut, canceled, cpuOver bool
	cancelCause                 error // context.Cause of the cancelled context
	state                       *os.ProcessState
	end                         time.Time
	// atExit: supervise returned at the payload's exit with nothing else
	// of the jail left but init, which Close still waits for (atexit_linux.go).
	atExit    bool
	payloadAt time.Time // when init reported the payload's exit
}

// launch starts init from a goroutine that keeps its OS thread locked
// until init is reaped: Pdeathsig fires when the starting *thread* exits,
// and a prepared jail may wait far longer than the call that made it.
func (sv *supervision) launch() error {
	sv.exited = make(chan struct{})
	sv.payloadEnd = make(chan struct{})
	sv.startedCh = make(chan struct{})
	sv.readerDone = make(chan struct{})
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		sv.begin = time.Now()
		if err := sv.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = sv.cmd.Wait()
		sv.state = sv.cmd.ProcessState
		sv.end = time.Now()
		close(sv.exited)
	}()
	if err := <-started; err != nil {
		return err
	}
	go func() { sv.readMessages(); close(sv.readerDone) }()
	return nil
}

// waitReady waits until init reports the payload started (true), or init
// ended, set-up outlasted limit, or ctx was canceled (false).
func (sv *supervision) waitReady(ctx context.Context, limit time.Duration) bool {
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case <-sv.startedCh:
		return true
	case <-sv.exited:
		// A payload that started and ended at once (python3 -c pass on a
		// loaded host) has both said: its start report, read from init's
		// socket until init's end closes it, decides, not the select's
		// pick between the two.
		select {
		case <-sv.readerDone:
		case <-time.After(time.Second):
		}
		select {
		case <-sv.startedCh:
			return true
		default:
			return false
		}
	case <-timer.C:
		sv.mu.Lock()
		sv.timedOut = true
		sv.mu.Unlock()
		return false
	case <-ctx.Done():
		sv.mu.Lock()
		sv.canceled, sv.cancelCause = true, context.Cause(ctx)
		sv.mu.Unlock()
		return false
	}
}

// supervise waits for init to exit, killing it on timeout or
// cancellation; the run's clock starts now. Killing init is enough to kill
// the whole jail: when a pid namespace's init dies the kernel SIGKILLs
// every other process in it, and init is only reaped after they are all
// gone. With atExit it may return at the payload's exit instead (see
// endsAtExit).
func (sv *supervision) supervise(ctx context.Context, spec Spec, atExit bool) {
	sv.clock = time.Now()
	// time.Timer runs on the monotonic clock: a wall-clock jump does not
	// shorten or stretch the limit.
	timer := time.NewTimer(spec.Timeout)
	defer timer.Stop()
	var cpuOver chan struct{}
	stopPoll := make(chan struct{})
	defer close(stopPoll)
	if sv.cg != nil && spec.Cgroup.CPUTime > 0 {
		cpuOver = make(chan struct{})
		go sv.cg.pollCPU(spec.Cgroup.CPUTime, stopPoll, func() { close(cpuOver) })
	}
	go sv.work.watch(stopPoll)
	var payloadEnd <-chan struct{}
	if atExit {
		payloadEnd = sv.payloadEnd
	}
	for waiting := true; waiting; {
		select {
		case <-sv.exited:
			waiting = false
		case <-payloadEnd:
			if sv.endsAtExit() {
				return
			}
			waiting = false
		case <-timer.C:
			sv.mu.Lock()
			sv.timedOut = sv.exit == nil
			sv.mu.Unlock()
			sv.kill()
		case <-cpuOver:
			sv.mu.Lock()
			sv.cpuOver = sv.exit == nil
			sv.mu.Unlock()
			sv.kill()
			cpuOver = nil
		case <-ctx.Done():
			sv.mu.Lock()
			sv.canceled, sv.cancelCause = true, context.Cause(ctx)
			sv.mu.Unlock()
			sv.kill()
			ctx = context.Background() // fire once
		}
	}
	sv.finish()
}

// finish waits until init is reaped and its reports and refused calls are
// all in.
func (sv *supervision) finish() {
	<-sv.exited
	<-sv.readerDone
	if sv.filter != nil {
		// Every filtered task is dead once init is reaped, so the
		// listener hangs up and Run returns; Close is for the path where
		// it somehow does not.
		select {
		case <-sv.filterDone:
		case <-time.After(time.Second):
		}
		sv.filter.Close()
		<-sv.filterDone
	}
}

func (sv *supervision) kill() {
	// os.Process signals through a pidfd where the kernel has them, so the
	// signal cannot hit a recycled pid.
	_ = sv.cmd.Process.Kill()
	if sv.cg != nil {
		// Belt and braces: the pid namespace already takes everything
		// down with init; the cgroup kill does not depend on it.
		_ = sv.cg.group.Kill()
	}
}

func (sv *supervision) noteBad(err error) {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	if sv.badMsg == nil {
		sv.badMsg = err
	}
}

// sendPlan gives init its plan, then, on cgroup v1, places init in the
// run's cgroup while init builds the root, and tells it to go on. Moving a
// task between v1 cgroups waits for an RCU grace period (milliseconds, far
// more under load); doing it beside init's mount work hides most of that.
// Init waits for "go" before it unshares its cgroup namespace and before
// anything of the payload runs.
func (sv *supervision) sendPlan(cfg *jailinit.Config, place func() error) {
	b, err := jailinit.EncodeConfig(cfg)
	if err == nil && len(b) > jailinit.MaxMsg {
		err = fmt.Errorf("the command, its environment and the mount plan take %d bytes, more than the %d a jail's plan may", len(b), jailinit.MaxMsg)
	}
	if err == nil {
		// One datagram: make room for it (root may exceed wmem_max).
		_ = unix.SetsockoptInt(sv.sock, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 2*len(b)+4096)
		err = unix.Sendmsg(sv.sock, b, nil, nil, 0)
		if errors.Is(err, unix.EMSGSIZE) {
			err = fmt.Errorf("the command, its environment and the mount plan take %d bytes, more than this host lets one message carry (net.core.wmem_max): %w", len(b), err)
		}
	}
	if err != nil {
		sv.noteBad(fmt.Errorf("send plan to init: %w", err))
		sv.kill()
		return
	}
	if place == nil {
		return
	}
	if err := place(); err != nil {
		sv.noteBad(fmt.Errorf("place jail in its cgroup: %w", err))
		sv.kill()
		return
	}
	if err := unix.Sendmsg(sv.sock, []byte(jailinit.GoMessage), nil, nil, 0); err != nil {
		sv.noteBad(fmt.Errorf("release init: %w", err))
		sv.kill()
	}
}

// readMessages reads init's reports until init is gone (EOF).
func (sv *supervision) readMessages() {
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(4*4))
	for {
		n, oobn, _, _, err := unix.Recvmsg(sv.sock, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return
		}
		m, err := jailinit.DecodeMsg(buf[:n])
		if err != nil {
			err = fmt.Errorf("bad message from init: %w", err)
			sv.noteBad(err)
			sv.kill()
			continue
		}
		fds := parseFDs(oob[:oobn])
		sv.mu.Lock()
		if sv.trace != nil && (m.Kind == jailinit.MsgStarted || m.Kind == jailinit.MsgExit) {
			sv.trace.add(m.Phases)
		}
		switch m.Kind {
		case jailinit.MsgStarted:
			if sv.started.IsZero() {
				sv.started = time.Now()
				close(sv.startedCh)
			}
		case jailinit.MsgExit:
			mm := m
			if sv.exit == nil {
				sv.payloadAt = time.Now()
				close(sv.payloadEnd)
			}
			sv.exit = &mm
		case jailinit.MsgError:
			mm := m
			sv.setupErr = &mm
		case jailinit.MsgWork:
			if len(fds) == 1 && sv.work.attach(fds[0]) {
				fds = nil
			}
		case jailinit.MsgSeccomp:
			if len(fds) == 1 && sv.filter == nil {
				sv.filter = seccomp.NewSupervisor(fds[0])
				sv.filter.ObserveNetwork(sv.net.observer(sv.proxied))
				sv.filter.LimitCPU(sv.supervisorCPUs, sv.jailCPU)
				sv.filterDone = make(chan struct{})
				go func(s *seccomp.Supervisor, done chan struct{}) { s.Run(); close(done) }(sv.filter, sv.filterDone)
				fds = nil
			}
		case jailinit.MsgProxy:
			err := sv.net.serve(fds)
			fds = nil
			if err != nil {
				sv.mu.Unlock()
				sv.noteBad(err)
				sv.kill()
				sv.mu.Lock()
			}
		default:
			sv.mu.Unlock()
			sv.noteBad(fmt.Errorf("unknown message %q from init", m.Kind))
			sv.kill()
			sv.mu.Lock()
		}
		sv.mu.Unlock()
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
}

func parseFDs(oob []byte) []int {
	if len(oob) == 0 {
		return nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for i := range msgs {
		if f, err := unix.ParseUnixRights(&msgs[i]); err == nil {
			fds = append(fds, f...)
		}
	}
	return fds
}

// result fills in how the run ended. Called after init is reaped and the
// reader has finished, or at the payload's exit (atExit), when the reader
// may still be reading init's end.
func (sv *supervision) result(res *Result, end *ending) error {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	if sv.setupErr != nil {
		return &SetupError{Step: sv.setupErr.Step, Message: sv.setupErr.Message, ExitCode: sv.setupErr.ExitCode}
	}
	if sv.badMsg != nil && sv.exit == nil {
		return setupError("supervise", sv.badMsg)
	}
	res.BlockedSyscalls = blockedOf(sv.filter)
	ended := sv.end
	if sv.atExit {
		ended = sv.payloadAt // init's reaping is still to come
	}
	res.WallMs = ms(wallTime(sv.begin, sv.started, sv.clock, ended))
	switch {
	case sv.cpuOver:
		// A CPU-time limit is a time limit: the same status as a timeout.
		end.CPUOver, res.ExitCode = true, ExitTimeout
	case sv.timedOut:
		end.TimedOut, res.ExitCode = true, ExitTimeout
	case sv.canceled && (sv.exit == nil || unix.WaitStatus(sv.exit.Status).Signaled()):
		// The payload did not end by itself: our kill ended it. Say so,
		// not "killed by signal 9", which reads like the jail's doing.
		end.Cancelled, res.ExitCode = true, ExitCancelled
		why := "cancelled"
		var cs CancelSignal
		if errors.As(sv.cancelCause, &cs) {
			res.ExitCode = ExitSignalOffset + int(cs.Signal)
			why = cs.Error()
		} else if sv.cancelCause != nil {
			why = sv.cancelCause.Error()
		}
		msg := fmt.Sprintf("cancelled (%s): the jail was killed after %.0f ms and removed", why, res.WallMs)
		res.Error = &msg
	case sv.exit != nil:
		ws := unix.WaitStatus(sv.exit.Status)
		res.UserMs = float64(sv.exit.UtimeUs) / 1e3
		res.SysMs = float64(sv.exit.StimeUs) / 1e3
		res.PeakMemoryBytes = uint64(sv.exit.MaxRSS) * 1024
		if ws.Signaled() {
			sig := int(ws.Signal())
			end.Signaled, res.ExitCode, res.Signal = true, ExitSignalOffset+sig, &sig
			// The policy kills only for a foreign ABI (i386, x32).
			end.SeccompKilled = ws.Signal() == unix.SIGSYS && sv.filter != nil
		} else {
			end.ExitStatus, res.ExitCode = ws.ExitStatus(), ws.ExitStatus()
		}
	case !sv.started.IsZero():
		// The jail's init died after the payload started (and took the
		// payload with it): what the payload saw is a SIGKILL, not a jail
		// that could not be set up.
		sig := int(unix.SIGKILL)
		end.Signaled, res.ExitCode, res.Signal = true, ExitSignalOffset+sig, &sig
	default:
		return setupError("supervise", fmt.Errorf("jail init ended without a report (%v)", sv.state))
	}
	end.OutputCut = res.StdoutTruncated || res.StderrTruncated
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

// wallTime is how long the run took: from the run's clock (Start), or, when
// there was none, from the payload's start, or else init's launch. A cold
// payload that ends before Start has even begun its clock (doctor's
// trivial run does) is timed from its own start, never negatively.
func wallTime(begin, started, clock, end time.Time) time.Duration {
	switch {
	case !clock.IsZero() && !clock.After(end):
		return end.Sub(clock)
	case !started.IsZero() && !started.After(end):
		return end.Sub(started)
	default:
		return end.Sub(begin)
	}
}
