package proctest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// A test that waits on a jail must end by its own deadline and say what it
// saw: a jail whose timeout never fires would otherwise hang the package
// until go test's global timeout, which aborts every other test of it
// unreported and leaves the stockade processes it started spinning.

// Grace is how long code waiting on a jail in this process gets, after
// its context expired, to kill the jail and return.
const Grace = 30 * time.Second

// Budget is d, or less when the test's own deadline (go test -timeout)
// comes sooner: a test must fail by its deadline before go test's global
// one aborts the whole package. A quarter of what is left, at most a
// minute, stays for the kill, the report and the tests that follow.
func Budget(t testing.TB, d time.Duration) time.Duration {
	dt, ok := t.(interface{ Deadline() (time.Time, bool) })
	if !ok {
		return d
	}
	end, ok := dt.Deadline()
	if !ok {
		return d
	}
	left := time.Until(end)
	left -= min(left/4, time.Minute)
	return min(d, max(left, time.Second))
}

// Within runs f with a context that expires after d (see Budget), for
// code that waits on a jail in this process (jail.Run, the CLI in
// process): an expired context kills the jail, and f returns. It reports
// whether the deadline expired. If f has not returned Grace after the
// deadline, Within fails the test at once and leaves f behind: the jail
// then dies with the test binary (its init has SIGKILL as parent-death
// signal). Call it from the test's goroutine.
func Within(t testing.TB, d time.Duration, f func(ctx context.Context)) (expired bool) {
	t.Helper()
	d = Budget(t, d)
	ctx, cancel := context.WithTimeoutCause(context.Background(), d, fmt.Errorf("the test's deadline of %v passed", d))
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(ctx)
	}()
	select {
	case <-done:
		return ctx.Err() != nil
	case <-time.After(d + Grace):
		t.Fatalf("%s: still waiting on a jail %v after the test's deadline of %v cancelled it: its kill does not work either", t.Name(), Grace, d)
		return true
	}
}

// Proc is a command started in a process group of its own, so that a
// deadline can kill it with everything it started there; its output is
// kept (as well as written where the caller sent it) to be shown when it
// overstays.
type Proc struct {
	Cmd            *exec.Cmd
	stdout, stderr *Buffer
	begin          time.Time
	done           chan struct{}
	waitErr        error
}

// Outcome is how a Proc ended.
type Outcome struct {
	Stdout, Stderr string // as far as the Proc kept them (not what went to a caller's *os.File)
	Err            error  // from exec.Cmd.Wait: *exec.ExitError for a non-zero exit
	State          *os.ProcessState
	// Expired is set when the deadline passed first: the process group was
	// killed, and Stdout and Stderr are what it printed until then.
	Expired bool
	Took    time.Duration // from the start
	cmdline string
	limit   time.Duration
}

// Code is the exit status; -1 for a process killed by a signal.
func (o Outcome) Code() int {
	if o.State == nil {
		return -1
	}
	return o.State.ExitCode()
}

// Overstayed says what a command that outlived its deadline printed, for
// the test's failure message; "" if it ended in time.
func (o Outcome) Overstayed() string {
	if !o.Expired {
		return ""
	}
	return fmt.Sprintf("%s still running after %v: killed its process group; stdout so far %q, stderr so far %q",
		o.cmdline, o.limit, tail(o.Stdout), tail(o.Stderr))
}

// Start starts cmd in a process group of its own (a session, if it asked
// for one) that dies with the test binary, keeping a copy of the stdout and
// stderr the caller did not hand an *os.File (given one writer for both,
// they stay one stream, kept as stdout). A command whose output
// buffers a descendant outside the group holds open is let go 5 s after it
// exits (exec.Cmd.WaitDelay).
func Start(cmd *exec.Cmd) (*Proc, error) {
	p := &Proc{Cmd: cmd, stdout: &Buffer{}, stderr: &Buffer{}, done: make(chan struct{})}
	Group(cmd)
	if cmd.Stdout != nil && cmd.Stdout == cmd.Stderr {
		// One writer for both is one pipe, in the order written
		// (CombinedOutput's): it stays one, kept as Stdout.
		w := keep(cmd.Stdout, p.stdout)
		cmd.Stdout, cmd.Stderr = w, w
	} else {
		cmd.Stdout = keep(cmd.Stdout, p.stdout)
		cmd.Stderr = keep(cmd.Stderr, p.stderr)
	}
	if cmd.WaitDelay == 0 {
		cmd.WaitDelay = 5 * time.Second
	}
	p.begin = time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmdline(cmd), err)
	}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Group makes cmd, not yet started, the leader of a process group of its
// own (unless it asked for a session, which is one), so that a deadline
// can kill everything it starts there, and has it killed with the test
// binary: a stockade left behind by a test binary that died (go test's
// timeout panics it) would keep its jail going. Pdeathsig follows the
// starting thread, which Go keeps for the life of the process unless a
// locked goroutine ends without unlocking, which no test does.
func Group(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if !cmd.SysProcAttr.Setsid {
		cmd.SysProcAttr.Setpgid, cmd.SysProcAttr.Pgid = true, 0
	}
	if cmd.SysProcAttr.Pdeathsig == 0 {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
}

// KillAfter kills the process group of cmd (made with Group, then
// started) d from now, for a test that must wait on cmd in its own way;
// stop cancels that and reports whether it had fired.
func KillAfter(cmd *exec.Cmd, d time.Duration) (stop func() (fired bool)) {
	var fired atomic.Bool
	timer := time.AfterFunc(d, func() {
		fired.Store(true)
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	})
	return func() bool {
		timer.Stop()
		return fired.Load()
	}
}

// keep adds buf to w: an *os.File the command gets as it is (a terminal,
// a pipe end the caller reads), so that is not copied.
func keep(w io.Writer, buf *Buffer) io.Writer {
	switch w.(type) {
	case nil:
		return buf
	case *os.File:
		return w
	}
	return io.MultiWriter(w, buf)
}

// Done is closed once the command has ended and been waited for.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Stdout is what the command has printed on stdout so far (see Start).
func (p *Proc) Stdout() string { return p.stdout.String() }

// Stderr is what the command has printed on stderr so far.
func (p *Proc) Stderr() string { return p.stderr.String() }

// Await waits until the command's stdout holds text, up to d: false if
// the command ended or d passed first.
func (p *Proc) Await(d time.Duration, text string) bool {
	end := time.Now().Add(d)
	for !strings.Contains(p.Stdout(), text) {
		if time.Now().After(end) {
			return false
		}
		select {
		case <-p.done:
			return strings.Contains(p.Stdout(), text)
		case <-time.After(10 * time.Millisecond):
		}
	}
	return true
}

// Kill SIGKILLs the command's process group and waits for the command.
func (p *Proc) Kill() {
	_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// Wait waits for the command, up to d: past it, the process group is
// killed and the Outcome says Expired.
func (p *Proc) Wait(d time.Duration) Outcome {
	o := Outcome{cmdline: cmdline(p.Cmd), limit: d}
	select {
	case <-p.done:
	case <-time.After(d):
		o.Expired = true
		p.Kill()
	}
	o.Took = time.Since(p.begin)
	o.Stdout, o.Stderr = p.Stdout(), p.Stderr()
	o.Err, o.State = p.waitErr, p.Cmd.ProcessState
	return o
}

// Run runs cmd to its end, up to d (see Budget): a command that could not
// start, or ran past d, fails the test with what it printed so far. Call
// it from the test's goroutine; elsewhere, Start and Wait.
func Run(t testing.TB, cmd *exec.Cmd, d time.Duration) Outcome {
	t.Helper()
	p, err := Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	o := p.Wait(Budget(t, d))
	if o.Expired {
		t.Fatalf("%s: %s", t.Name(), o.Overstayed())
	}
	return o
}

// ExitCode is err's exit status as exec.Cmd.Wait reports it: 0 for nil,
// and ok false for an error that is not an exit (the command did not run).
func ExitCode(err error) (code int, ok bool) {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, true
	case errors.As(err, &ee):
		return ee.ExitCode(), true
	}
	return -1, false
}

func cmdline(cmd *exec.Cmd) string {
	s := strings.Join(cmd.Args, " ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

func tail(s string) string {
	if len(s) > 2000 {
		return "..." + s[len(s)-2000:]
	}
	return s
}
