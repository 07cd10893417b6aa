package jail

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// outputPipeSize is what the jail's stdout and stderr pipes are grown to:
// a flooding jail then moves up to this much per wakeup of stockade's
// drain instead of 64 KiB, and stockade's share (outside the jail's CPU
// limit) shrinks with the number of its system calls. The pages are
// allocated by the writer and charged to its memory cgroup (pipe_write
// allocates with __GFP_ACCOUNT), so a full pipe is the jail's memory,
// not the host's; stockade pays only the ring's slot array (a few KiB).
const outputPipeSize = 1 << 20

// discardLen is how much one splice to /dev/null may move: more than a
// pipe holds, so each call empties it.
const discardLen = 16 << 20

// growPipe enlarges the pipe f to outputPipeSize, best effort: within
// the administrator's /proc/sys/fs/pipe-max-size (root could exceed it;
// it should not), and only as root. An unprivileged user's pipes count
// against its pipe-user-pages-soft (16384 pages by default), past which
// every new pipe of that user shrinks to two pages: concurrent rootless
// runs must not do that to the user's other programs.
func growPipe(f *os.File) {
	if os.Geteuid() != 0 {
		return
	}
	size := outputPipeSize
	if b, err := os.ReadFile("/proc/sys/fs/pipe-max-size"); err == nil {
		if m, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && m < size {
			size = m
		}
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		// Failure leaves the default 64 KiB: slower to drain, not wrong.
		_, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, size)
	})
}

// drain reads one output stream of the jail to its end. Past the limit
// nothing more is kept, so the rest is not copied through stockade at
// all: it is spliced to /dev/null, which only releases the pipe's pages.
// Reading it 32 KiB at a time cost stockade 0.6-0.8 s of CPU (outside
// the jail's cgroup) for a jail flooding stdout 4 s at --cpus 0.2.
//
// Even spliced, dropping costs stockade freeing each page the jail filled
// (0.4-0.6 s of CPU for 4 GB in 4 s at --cpus 0.2), so past the limit the
// drain is also paced by pace, and the jail, blocked on its full pipe,
// waits for it.
func (c *capture) drain(f *os.File, pace *drainPace) {
	chunk := make([]byte, 32<<10)
	for !c.full() {
		n, err := f.Read(chunk)
		if n > 0 {
			c.add(chunk[:n])
		}
		if err != nil {
			return
		}
	}
	if c.spliceAway(f, pace) {
		return
	}
	// No splice (a kernel or /dev/null without it): big reads still cut
	// the number of system calls.
	big := make([]byte, outputPipeSize)
	for {
		n, err := f.Read(big)
		c.count(int64(n))
		if err != nil {
			return
		}
	}
}

// spliceAway discards everything left in f, counting it, and reports
// whether it reached the end; false means splice failed and the caller
// must read the rest.
func (c *capture) spliceAway(f *os.File, pace *drainPace) bool {
	null, err := unix.Open("/dev/null", unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(null)
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	for {
		var n int64
		var serr error
		var cost time.Duration
		// Read waits in Go's poller whenever the callback returns false
		// (the pipe is empty but a writer remains).
		if err := rc.Read(func(fd uintptr) bool {
			for {
				// The callback runs on one thread throughout: its clock
				// sees what the splice cost.
				t0 := threadCPU()
				n, serr = unix.Splice(int(fd), nil, null, nil, discardLen, unix.SPLICE_F_NONBLOCK)
				cost += threadCPU() - t0
				if !errors.Is(serr, unix.EINTR) {
					return !errors.Is(serr, unix.EAGAIN)
				}
			}
		}); err != nil {
			return true // f was closed: nothing more to drain
		}
		if serr != nil {
			return false
		}
		if n == 0 {
			return true // every writer is gone
		}
		c.count(n)
		pace.spend(cost + spliceOverhead)
	}
}

// drainPace is a token bucket of CPU time shared by a run's two drains
// once they only drop output: tokens accrue at the run's --cpus per
// second of wall time (up to drainBurst), and each splice pays what it
// cost and what the jail used meanwhile (its cgroup's counter), so that
// the jail and the dropping of its output together stay within the
// jail's limit, as the seccomp supervisor does for refused calls. In
// debt, the drain waits; the jail blocks on its full pipe, using
// nothing, and its timeout still ends it. A nil drainPace never waits.
type drainPace struct {
	mu     sync.Mutex
	rate   float64 // cores
	tokens time.Duration
	last   time.Time

	jail       func() (time.Duration, error)
	jailUsed   time.Duration
	jailSample time.Time

	// exited is closed when init has been reaped: nothing writes any
	// more, so the rest is dropped at once and the result is not held up.
	exited <-chan struct{}
	done   bool
}

// spliceOverhead is charged per splice on top of its own thread's time:
// what waking the drain from Go's poller costs the runtime on other
// threads, which the thread clock does not see, and the scheduler's
// switches. Measured here (2 cores, a VM, load 5-13): dropping a 4 s flood
// cost the process 600-660 ms of which the splices' own thread time was
// 270 ms, over 4000-5300 splices (62-84 us each); charging 80 us still
// left the host at 0.90-0.98 s against 0.8 s, so this is about twice it.
// Charging too much only slows a flood further.
const spliceOverhead = 150 * time.Microsecond

// drainBurst is what dropping may spend at once before the rate applies:
// a run that prints a little past its limit then ends is never slowed.
const drainBurst = 20 * time.Millisecond

// drainSampleEvery bounds how often the jail's counter is read while the
// bucket is not in debt (a file read per 1 MiB spliced is cheap, one per
// splice of a few pages would not be).
const drainSampleEvery = 2 * time.Millisecond

// drainMinWait is the shortest wait once in debt: many tiny waits cost
// the Go runtime more than they save.
const drainMinWait = 10 * time.Millisecond

// newDrainPace paces at cores (0: no limit, no pacing). jail reads the
// jail's CPU; without it (no cgroup, or its counter cannot be read) the
// jail's usage is unseen, so dropping takes half of cores, failing
// closed as the supervisor does.
func newDrainPace(cores float64, jail func() (time.Duration, error), exited <-chan struct{}) *drainPace {
	if cores <= 0 {
		return nil
	}
	p := &drainPace{rate: cores, tokens: drainBurst, last: time.Now(), jail: jail, exited: exited}
	if jail != nil {
		used, err := jail()
		if err != nil {
			p.jail = nil
		}
		p.jailUsed, p.jailSample = used, p.last
	}
	if p.jail == nil {
		p.rate = cores / 2
	}
	return p
}

// spend pays cost and, while the bucket is in debt, waits.
func (p *drainPace) spend(cost time.Duration) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock() // the other drain waits too: the debt is shared
	if p.done {
		return
	}
	p.tokens -= cost
	for force := false; ; force = true {
		now := time.Now()
		p.tokens = min(p.tokens+time.Duration(float64(now.Sub(p.last))*p.rate), drainBurst)
		p.last = now
		if p.jail != nil && (force || p.tokens < 0 || now.Sub(p.jailSample) >= drainSampleEvery) {
			if j, err := p.jail(); err == nil && j >= p.jailUsed {
				p.tokens -= j - p.jailUsed
				p.jailUsed = j
			}
			p.jailSample = now
		}
		if p.tokens >= 0 {
			return
		}
		t := time.NewTimer(max(time.Duration(float64(-p.tokens)/p.rate), drainMinWait))
		select {
		case <-p.exited:
			t.Stop()
			p.done = true
			return
		case <-t.C:
		}
	}
}

func threadCPU() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
