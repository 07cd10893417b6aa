package seccomp

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"
)

// Blocked is one distinct refused system call of a run.
type Blocked struct {
	Name    string `json:"name"`
	Count   int    `json:"count"`
	Example string `json:"example"` // the first such call, e.g. socket(AF_PACKET, SOCK_RAW, 768)
}

// Supervisor answers a listener's notifications from outside the jail. Every
// refused call is answered with EPERM and never allowed to continue: it does
// not reach the kernel. The policy's observed calls (connect and the sends
// with a destination) go to the NetObserver and continue unless it refuses
// them. If the supervisor stops or dies
// while the jail runs, the kernel answers the jail's refused calls ENOSYS
// instead; they stay refused.
type Supervisor struct {
	notifyFD int
	wakeFD   int // eventfd that Close writes; -1 if none could be made

	mu       sync.Mutex
	calls    map[int32]*Blocked
	observer NetObserver
	err      error
	running  bool
	closed   bool
	done     chan struct{}

	cpu cpuBudget
}

// pollInterval bounds how long Close waits for Run when no eventfd could be
// made to wake it.
const pollInterval = 100 // milliseconds

// NewSupervisor takes ownership of notifyFD, a listener returned by Load
// (here, received from the jail over SCM_RIGHTS); Close closes it.
func NewSupervisor(notifyFD int) *Supervisor {
	s := &Supervisor{notifyFD: notifyFD, wakeFD: -1, calls: map[int32]*Blocked{}, done: make(chan struct{})}
	if fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err == nil {
		s.wakeFD = fd
	}
	return s
}

// Run answers notifications until no process uses the filter any more (the
// listener reports POLLHUP) or Close is called. Call it once, typically on
// its own goroutine.
func (s *Supervisor) Run() {
	s.mu.Lock()
	if s.running || s.closed {
		s.mu.Unlock()
		return
	}
	s.running = true
	s.mu.Unlock()
	defer close(s.done)
	s.cpu.start()

	fds := []unix.PollFd{{Fd: int32(s.notifyFD), Events: unix.POLLIN}}
	timeout := -1
	if s.wakeFD >= 0 {
		fds = append(fds, unix.PollFd{Fd: int32(s.wakeFD), Events: unix.POLLIN})
	} else {
		timeout = pollInterval
	}
	for {
		if s.isClosed() {
			return
		}
		idle := time.Now()
		_, err := unix.Poll(fds, timeout)
		if time.Since(idle) >= idleForgiven {
			s.cpu.forgive()
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			s.fail(fmt.Errorf("seccomp supervisor: poll listener: %w", err))
			return
		}
		if len(fds) > 1 && fds[1].Revents != 0 {
			return // Close
		}
		ev := fds[0].Revents
		// Answer what is pending before honouring a hang-up: a call left
		// unanswered would wait until the listener closes.
		if ev&unix.POLLIN != 0 {
			if err := s.serveOne(); err != nil {
				s.fail(err)
				return
			}
			// The refused caller (and every task queued behind it)
			// stays blocked in the kernel meanwhile, using nothing. The
			// jail's other threads may run on, so its counter is read
			// again after each wait until the debt is paid.
			for d := s.cpu.spend(false); d > 0; d = s.cpu.spend(true) {
				if !s.wait(d) {
					return // Close
				}
			}
			continue
		}
		if ev&unix.POLLNVAL != 0 {
			s.fail(fmt.Errorf("seccomp supervisor: fd %d is not open", s.notifyFD))
			return
		}
		if ev&(unix.POLLHUP|unix.POLLERR) != 0 {
			return
		}
	}
}

// LimitCPU bounds the CPU time Run spends answering to cores (a fraction
// of one CPU, at most 1: Run is one thread). Each refused call costs the
// supervisor a few microseconds outside the jail's cgroup; a jail looping
// on one would otherwise turn its own CPU limit into that much again of
// stockade's. jailCPU, if not nil, reads the CPU the jail itself has used
// (its cgroup's counter): the supervisor's share is then what the jail
// leaves of the limit, so supervisor and jail together stay within cores
// over any window (plus one burst). Past the budget, Run waits before
// reading the next notification, and the callers wait blocked in the
// kernel. Call it before Run; cores 0 means no limit.
func (s *Supervisor) LimitCPU(cores float64, jailCPU func() (time.Duration, error)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running {
		s.cpu.rate = min(cores, 1)
		if jailCPU != nil {
			// The jail and the supervisor together may use the limit,
			// which can exceed the one thread's single core.
			s.cpu.rate = cores
		}
		s.cpu.jail = jailCPU
	}
}

// cpuBudget is a token bucket of CPU time: tokens accrue at rate CPUs per
// second of wall time, up to cpuBurst; answering pays by the process's CPU
// clock, and, if jail is set, what the jail used meanwhile.
//
// The process clock, not the supervisor's thread's: each time that thread
// blocks and wakes, the Go runtime spends CPU on other threads, which a
// thread clock misses (it left 250-300 ms of 600 unpaid in 4 s of a looping
// jail, even with an estimate per block). In `stockade serve` the process
// clock also counts the server's other work and its other jails'
// supervisors, so each supervisor pays for more than its own: a busy
// server answers its jails' refused calls more slowly, and never spends
// more than a jail's limit on any one of them.
type cpuBudget struct {
	rate   float64 // cores; 0 = no limit
	tokens time.Duration
	last   time.Time     // wall clock of the last accrual
	proc   time.Duration // process CPU time at the last charge

	jail       func() (time.Duration, error)
	jailUsed   time.Duration // the jail's CPU at the last sample
	jailSample time.Time     // wall clock of the last sample
}

// cpuBurst is how much CPU the supervisor may spend at once before the
// rate applies: enough for the occasional refused call of a normal run
// to be answered at once.
const cpuBurst = 20 * time.Millisecond

// jailSampleEvery bounds how often the jail's counter is read while the
// bucket is not in debt: a file read costs about as much as answering a
// call. The jail can use at most this much unseen per core it has.
const jailSampleEvery = 2 * time.Millisecond

// minWait is the shortest wait once in debt: each wait wakes the Go
// runtime on other threads, and many tiny waits (one per call at a few
// microseconds of debt) cost the process more than the calls did.
const minWait = 10 * time.Millisecond

func processCPU() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

func (b *cpuBudget) start() {
	b.tokens, b.last, b.proc = cpuBurst, time.Now(), processCPU()
	if b.jail != nil {
		used, err := b.jail()
		if err != nil {
			// Fail closed to the supervisor's own share alone: the jail's
			// usage cannot be seen, so assume it uses half the limit.
			b.jail, b.rate = nil, min(b.rate/2, 1)
			return
		}
		b.jailUsed, b.jailSample = used, b.last
	}
}

// charge accrues tokens and pays for the CPU used since the last charge.
// force reads the jail's counter whatever its age.
//
// What was spent since the last charge is set against what accrued over
// the same time before the bucket is capped: capping first forgave the
// accrual of a long quiet spell but billed all that the jail and stockade
// spent in it, so a jail that had computed (or printed, which stockade
// copies) within its limit for seconds then waited seconds for one
// connect (seen: 3-4 s).
func (b *cpuBudget) charge(force bool) {
	now := time.Now()
	b.tokens += time.Duration(float64(now.Sub(b.last)) * b.rate)
	b.last = now
	b.pay()
	if b.jail != nil && (force || now.Sub(b.jailSample) >= jailSampleEvery) {
		if j, err := b.jail(); err == nil && j >= b.jailUsed {
			b.tokens -= j - b.jailUsed
			b.jailUsed = j
		}
		b.jailSample = now
		b.pay() // the read itself cost CPU too
	}
	b.tokens = min(b.tokens, cpuBurst)
}

// idleForgiven is how long the supervisor must have waited for a call
// before what the process spent meanwhile is not billed to it: stockade's
// other work (copying a jail's output, in `stockade serve` other jails)
// is not the supervisor's, and billing it made a jail that printed 200 MB
// wait 4-6 s for its next connect. A jail looping on calls never leaves
// it idle that long; one that spaces its calls out gets at most one
// unbilled wake-up per idleForgiven, a fraction of a percent of a core.
const idleForgiven = 5 * time.Millisecond

// forgive starts the process clock's bill afresh after a long idle (see
// idleForgiven). The jail's own CPU is still billed, against what accrued.
func (b *cpuBudget) forgive() { b.proc = processCPU() }

// pay takes from the bucket the process CPU spent since the last payment.
func (b *cpuBudget) pay() {
	proc := processCPU()
	b.tokens -= proc - b.proc
	b.proc = proc
}

// spend charges the CPU used since the last call and returns how long to
// wait until the bucket is no longer in debt; 0 once it is not.
func (b *cpuBudget) spend(force bool) time.Duration {
	if b.rate <= 0 {
		return 0
	}
	b.charge(force)
	if b.tokens >= 0 {
		return 0
	}
	return max(time.Duration(float64(-b.tokens)/b.rate), minWait)
}

// wait sleeps for d, or less if Close is called meanwhile; it reports
// false if Close was called.
func (s *Supervisor) wait(d time.Duration) bool {
	if s.wakeFD < 0 {
		time.Sleep(min(d, pollInterval*time.Millisecond))
		return !s.isClosed()
	}
	fds := []unix.PollFd{{Fd: int32(s.wakeFD), Events: unix.POLLIN}}
	ms := int((d + time.Millisecond - 1) / time.Millisecond)
	n, err := unix.Poll(fds, ms)
	if err != nil && err != unix.EINTR {
		time.Sleep(min(d, pollInterval*time.Millisecond))
	}
	return !(n > 0 && fds[0].Revents != 0) && !s.isClosed()
}

// serveOne reads one notification, refuses it and records it.
func (s *Supervisor) serveOne() error {
	var req notifReq
	switch err := notifRecv(s.notifyFD, &req); {
	case err == nil:
	case errors.Is(err, unix.EINTR), errors.Is(err, unix.ENOENT):
		// ENOENT: the caller died or was interrupted before we read it.
		return nil
	default:
		return fmt.Errorf("seccomp supervisor: receive notification: %w", err)
	}
	resp := notifResp{ID: req.ID, Error: -int32(unix.EPERM)}
	call := observedCall(req.Data.Nr)
	if call != "" {
		// Observed, not refused: no policy refuses these calls, so a
		// notification for one is its observation.
		resp = s.observe(&req, call)
	} else {
		// Counted before it is answered: once the caller has its EPERM
		// it may go on and end (a session's cell, a run that ends at its
		// payload's exit), and whoever reads the count then must find it.
		// A caller that dies before the answer was still refused.
		s.record(req.Data)
	}
	for {
		err := notifSend(s.notifyFD, &resp)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		// ENOENT: the caller died (or a signal pulled it out of the call)
		// after we read it; there is nobody left to answer.
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("seccomp supervisor: answer notification: %w", err)
		}
		break
	}
	return nil
}

func (s *Supervisor) record(d notifData) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.calls[d.Nr]; ok {
		b.Count++
		return
	}
	name := syscallName(d.Nr)
	s.calls[d.Nr] = &Blocked{Name: name, Count: 1, Example: Describe(name, d.Args)}
}

// syscallName names a native-architecture call; the filter kills every other
// architecture before it could notify.
func syscallName(nr int32) string {
	if arch, err := libseccomp.GetNativeArch(); err == nil {
		if name, err := libseccomp.ScmpSyscall(nr).GetNameByArch(arch); err == nil {
			return name
		}
	}
	return "syscall_" + strconv.Itoa(int(nr))
}

func (s *Supervisor) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
	}
}

func (s *Supervisor) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Err reports why Run stopped early, if it did.
func (s *Supervisor) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close stops Run, waits for it, and closes the listener. Closing the
// listener makes the kernel answer any further refused call ENOSYS.
func (s *Supervisor) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	running := s.running
	s.mu.Unlock()
	if running {
		if s.wakeFD >= 0 {
			one := [8]byte{1}
			_, _ = unix.Write(s.wakeFD, one[:])
		}
		<-s.done
	}
	var err error
	if e := unix.Close(s.notifyFD); e != nil {
		err = fmt.Errorf("seccomp supervisor: close listener: %w", e)
	}
	if s.wakeFD >= 0 {
		_ = unix.Close(s.wakeFD)
	}
	return err
}

// Blocked lists the distinct refused calls, sorted by name, with how often
// each was made and the first one as an example. Call it after Run returns.
func (s *Supervisor) Blocked() []Blocked {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Blocked, 0, len(s.calls))
	for _, b := range s.calls {
		out = append(out, *b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
