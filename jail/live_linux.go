package jail

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// What a caller may do with a jail while it runs: a server session lives
// for many requests in one started jail, reads what it has used around
// each of them, signals its interpreter, pipes each request's output in
// and writes files into /work. Nothing here trusts the jail: every figure
// is the kernel's (cgroup, fstatfs, pidfd) or the supervisor's.

// ErrEnded is a live reading of a jail that has ended.
var ErrEnded = errors.New("jail: the jail has ended")

// Usage is what a jail has used so far.
type Usage struct {
	MemoryBytes     uint64 // memory charged to the jail's cgroup now (/work's tmpfs included)
	MemoryPeakBytes uint64 // the most since the jail was made, or since ResetMemoryPeak
	CPU             time.Duration
	Pids            uint64
	OOMKills        uint64
	PidsLimitHit    bool
	WorkBytes       uint64 // /work's tmpfs now
	Blocked         []BlockedSyscall
	Network         []NetworkDecision
}

// Usage reads what the running jail has used so far; ErrEnded once it has
// ended (Start's Result has the totals then). A jail without a cgroup
// reports zeros for what the cgroup would count.
func (p *Prepared) Usage() (Usage, error) {
	var u Usage
	if p.sv == nil || p.closed {
		return u, ErrEnded
	}
	select {
	case <-p.sv.exited:
		return u, ErrEnded
	default:
	}
	if p.cg != nil {
		st, err := p.cg.live()
		if err != nil {
			return u, err
		}
		u.MemoryBytes, u.MemoryPeakBytes, u.CPU = st.MemoryNow, st.MemoryPeak, st.CPUUsage
		u.Pids, u.OOMKills, u.PidsLimitHit = st.PidsNow, st.OOMKills, st.PidsLimitHit
	}
	u.WorkBytes = p.sv.work.now()
	p.sv.mu.Lock()
	filter := p.sv.filter
	p.sv.mu.Unlock()
	u.Blocked = blockedOf(filter)
	u.Network = p.net.decisions()
	return u, nil
}

// ResetMemoryPeak starts the jail's memory peak over, so that the next
// Usage says the most used since. It fails on cgroup v2, where the kernel
// keeps one peak for the group's life (cgroup.ErrPeakNotResettable), and
// without a cgroup.
func (p *Prepared) ResetMemoryPeak() error {
	if p.cg == nil {
		return errors.New("jail: no cgroup")
	}
	return p.cg.resetPeak()
}

// WorkOwner is the jail user's host uid and gid: what a file the caller
// writes into /work must belong to for the jail to change it.
func (p *Prepared) WorkOwner() (uid, gid int) { return p.id.hostUID, p.id.hostGID }

// Process is one process of a live jail, held by a pidfd: a signal sent
// through it reaches that process or none, never one that reused its pid.
type Process struct{ fd int }

// OpenProcess opens pid (a host pid, as SO_PASSCRED or SCM_CREDENTIALS
// tell it) if it is the payload, the one child of the jail's init that
// init started; any other process is refused, so a pid that a caller got
// wrong or that was reused cannot be signalled through the jail.
func (p *Prepared) OpenProcess(pid int) (*Process, error) {
	if p.sv == nil || p.closed || pid <= 0 {
		return nil, ErrEnded
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	// Read after the pidfd pins the process: if pid was reused before, this
	// reads the new process, whose parent is not our init.
	ppid, err := parentOf(pid)
	if err != nil || ppid != p.sv.cmd.Process.Pid {
		unix.Close(fd)
		if err == nil {
			err = fmt.Errorf("its parent is %d, not the jail's init %d", ppid, p.sv.cmd.Process.Pid)
		}
		return nil, fmt.Errorf("process %d is not the jail's payload: %w", pid, err)
	}
	return &Process{fd: fd}, nil
}

// parentOf reads a process's parent from /proc/PID/stat. The command
// name, in parentheses, may hold anything; the fields after its last ')'
// are the kernel's.
func parentOf(pid int) (int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 2 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected %q", pid, b)
	}
	return strconv.Atoi(f[1])
}

// Signal sends sig to the process (pidfd_send_signal).
func (pr *Process) Signal(sig unix.Signal) error {
	return unix.PidfdSendSignal(pr.fd, sig, nil, 0)
}

// Close releases the pidfd.
func (pr *Process) Close() error { return unix.Close(pr.fd) }

// ExecOutput drains the read ends of two pipes whose write ends the
// caller passed into the running jail (one request of a server session),
// as the jail's own stdout and stderr are drained: limit bytes kept per
// stream and passed to the writers as they come, the rest spliced away,
// paced within the jail's CPU limit.
type ExecOutput struct {
	out, err     *capture
	outR, errR   *os.File
	done         chan struct{}
	stop         chan struct{}
	finishedOnce bool
}

// DrainOutput starts draining stdout and stderr (read ends; the caller
// keeps no write end) until Finish.
func (p *Prepared) DrainOutput(stdout, stderr *os.File, limit int64, wout, werr io.Writer) *ExecOutput {
	o := &ExecOutput{out: &capture{limit: limit, stream: wout}, err: &capture{limit: limit, stream: werr},
		outR: stdout, errR: stderr, done: make(chan struct{}, 2), stop: make(chan struct{})}
	growPipe(stdout)
	growPipe(stderr)
	var jailCPU func() (time.Duration, error)
	if p.sv != nil {
		jailCPU = p.sv.jailCPU
	}
	pace := newDrainPace(p.spec.Cgroup.CPUs, jailCPU, o.stop)
	go func() { o.out.drain(stdout, pace); o.done <- struct{}{} }()
	go func() { o.err.drain(stderr, pace); o.done <- struct{}{} }()
	return o
}

// Output is what one request wrote, as Result has it for a whole run.
type Output struct {
	Stdout, Stderr                   string
	StdoutBytes, StderrBytes         int64
	StdoutTruncated, StderrTruncated bool
}

// Finish waits up to wait for every writer of the pipes to close them
// (the interpreter does when its request ends; a process it started and
// left running may not), then stops reading: what such a process writes
// later is not the request's. It closes the read ends.
func (o *ExecOutput) Finish(wait time.Duration) Output {
	if !o.finishedOnce {
		o.finishedOnce = true
		timer := time.NewTimer(wait)
		stopped := false
		for n := 0; n < 2; {
			select {
			case <-o.done:
				n++
			case <-timer.C:
				// A past deadline fails the pending and every later read
				// of the drain, which then returns; a paced drop stops
				// waiting.
				_ = o.outR.SetReadDeadline(time.Now())
				_ = o.errR.SetReadDeadline(time.Now())
				close(o.stop)
				stopped = true
			}
		}
		timer.Stop()
		if !stopped {
			close(o.stop)
		}
		o.outR.Close()
		o.errR.Close()
	}
	return Output{Stdout: o.out.buf.String(), Stderr: o.err.buf.String(),
		StdoutBytes: o.out.total, StderrBytes: o.err.total,
		StdoutTruncated: o.out.truncated(), StderrTruncated: o.err.truncated()}
}

// Processes lists the host pids of the jail's live processes, its init
// included, read from the host's /proc: each process in the jail's pid
// namespace (its inode, which nothing inside the jail can name otherwise)
// and each descendant of the jail's init (a pid namespace the jail's code
// made inside its own is another inode, but its processes stay the
// init's descendants: orphans are reparented within). Zombies are left
// out: dead, they hold nothing and run nothing, and the jail's init reaps
// them in its own time. A process that exits while it is read is simply
// not listed.
func (p *Prepared) Processes() ([]int, error) {
	if p.sv == nil || p.closed {
		return nil, ErrEnded
	}
	initPID := p.sv.cmd.Process.Pid
	ns, err := os.Readlink("/proc/" + strconv.Itoa(initPID) + "/ns/pid")
	if err != nil {
		return nil, fmt.Errorf("the jail's pid namespace (/proc/%d/ns/pid): %w", initPID, err)
	}
	d, err := os.Open("/proc")
	if err != nil {
		return nil, fmt.Errorf("open /proc: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("list /proc: %w", err)
	}
	type proc struct {
		ppid   int
		inNS   bool
		zombie bool
	}
	procs := make(map[int]proc, len(names))
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid <= 0 {
			continue
		}
		st, ppid, err := statOf(pid)
		if err != nil {
			continue // gone
		}
		l, _ := os.Readlink("/proc/" + name + "/ns/pid")
		procs[pid] = proc{ppid: ppid, inNS: l == ns, zombie: st == 'Z' || st == 'X'}
	}
	in := func(pid int) bool {
		// A parent chain is at most as long as the host's process count.
		for n := 0; n <= len(procs) && pid > 1; n++ {
			pr, ok := procs[pid]
			if !ok {
				return false
			}
			if pid == initPID || pr.inNS {
				return true
			}
			pid = pr.ppid
		}
		return false
	}
	var pids []int
	for pid, pr := range procs {
		if !pr.zombie && in(pid) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// statOf reads a process's state letter and parent from /proc/PID/stat
// (the fields after the command name's last ')', which may hold anything).
func statOf(pid int) (byte, int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: unexpected %q", pid, b)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 || len(f[0]) != 1 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: unexpected %q", pid, b)
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return 0, 0, fmt.Errorf("/proc/%d/stat: parent %q: %w", pid, f[1], err)
	}
	return f[0][0], ppid, nil
}

// InitPID is the host pid of the jail's init (0 once it is closed).
func (p *Prepared) InitPID() int {
	if p.sv == nil || p.closed {
		return 0
	}
	return p.sv.cmd.Process.Pid
}
