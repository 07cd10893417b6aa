package jail

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/stockade/stockade/cgroup"
)

// runCgroup is the cgroup side of one run: created with its limits before
// init starts, init placed in it before it runs anything of the payload's,
// read and removed after.
type runCgroup struct {
	group *cgroup.Group
	mode  cgroup.Mode
	mgr   *cgroup.Manager // closed after the group is deleted (close)

	// mu keeps a live reading (Prepared.Usage, from another goroutine)
	// from racing the group's deletion, which cgroup.Group forbids.
	mu   sync.Mutex
	gone bool
}

// newRunCgroup creates the run's cgroup. Failing to enforce a requested
// limit is an error: the run does not go ahead with less isolation than
// asked for (--no-cgroup is the explicit opt-out).
func newRunCgroup(spec Spec, own *ownership, id string, notices io.Writer) (*runCgroup, error) {
	logf := func(format string, a ...any) {
		if notices != nil {
			fmt.Fprintf(notices, "stockade: cgroup: "+format+"\n", a...)
		}
	}
	m, err := cgroup.NewManager(cgroup.Options{Parent: spec.Host.CgroupParent, Logf: logf})
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, cgroupFix(err))
	}
	l := cgroup.Limits{MemoryMax: spec.Cgroup.MemoryMax, SwapMax: spec.Cgroup.SwapMax,
		CPUs: spec.Cgroup.CPUs, PidsMax: spec.Cgroup.PidsMax}
	if err := m.Check(l); err != nil {
		closeManager(m, logf)
		return nil, fmt.Errorf("%w (%s)", err, cgroupFix(err))
	}
	// Recorded before they exist: a SIGKILL between the record and the
	// mkdir leaves a record of nothing, never a group nobody knows of.
	for _, d := range m.GroupDirs(id) {
		if err := own.lock.Record(recordCgroup, d); err != nil {
			closeManager(m, logf)
			return nil, err
		}
	}
	g, err := m.Create(id, l)
	if err != nil {
		closeManager(m, logf)
		return nil, err
	}
	return &runCgroup{group: g, mode: m.Mode(), mgr: m}, nil
}

// close deletes the group (a no-op once finish has) and then closes the
// manager, releasing its lock on the parent cgroup: on v2, a stockade
// exiting after its last run then restores the parent (cgroup.Restore).
// It returns the group's deletion error; the manager's is a notice.
func (c *runCgroup) close(notices io.Writer) error {
	// A group left behind keeps the parent's controllers in use, and
	// Restore then sees a second child and undoes nothing.
	c.mu.Lock()
	c.gone = true
	err := c.group.Delete()
	c.mu.Unlock()
	closeManager(c.mgr, func(format string, a ...any) {
		if notices != nil {
			fmt.Fprintf(notices, "stockade: cgroup: "+format+"\n", a...)
		}
	})
	return err
}

func closeManager(m *cgroup.Manager, logf func(string, ...any)) {
	if err := m.Close(); err != nil {
		logf("%v", err)
	}
}

// pollCPU ends the run when the whole tree has used more CPU time than the
// limit. Polling the cgroup counts every process and thread, which
// RLIMIT_CPU (per process, the backstop) cannot.
func (c *runCgroup) pollCPU(limit time.Duration, stop <-chan struct{}, over func()) {
	every := limit / 20
	every = max(every, 10*time.Millisecond)
	every = min(every, 100*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if used, err := c.group.CPUUsage(); err == nil && used >= limit {
				over()
				return
			}
		}
	}
}

// finish reads what the cgroup saw into res and, with remove, removes
// the cgroup (without, close does: init is still exiting in it).
func (c *runCgroup) finish(res *Result, end *ending, remove bool) error {
	c.mu.Lock()
	c.gone = true
	st, err := c.group.Stats()
	var delErr error
	if remove {
		delErr = c.group.Delete()
	}
	c.mu.Unlock()
	if err != nil {
		return fmt.Errorf("cgroup stats: %w", err)
	}
	res.Cgroup = string(c.mode)
	res.PeakMemoryBytes = st.MemoryPeak
	res.CPUMs = ms(st.CPUUsage)
	res.PidsPeak = st.PidsPeak
	end.OOMKilled, end.PidsLimitHit = st.OOMKills > 0, st.PidsLimitHit
	if delErr != nil {
		return fmt.Errorf("remove cgroup: %w", delErr)
	}
	return nil
}

// live reads the group while the jail runs.
func (c *runCgroup) live() (cgroup.Stats, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone {
		return cgroup.Stats{}, ErrEnded
	}
	return c.group.Stats()
}

// resetPeak starts the memory peak over (see cgroup.Group.ResetMemoryPeak).
func (c *runCgroup) resetPeak() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone {
		return ErrEnded
	}
	return c.group.ResetMemoryPeak()
}

// cgroupFix is the way out when no usable cgroup is found: a normal user
// cannot write to cgroups it was not given, and needs one delegated.
func cgroupFix(err error) string { return CgroupFix(err, true) }

// CgroupFix is the way out of err, a cgroup that is not usable, for a
// command that has --no-cgroup (optOut: run and its kin) or not (serve: a
// server runs no jail without its limits).
func CgroupFix(err error, optOut bool) string {
	or := ""
	if optOut {
		or = "; or use --no-cgroup to run with rlimits only"
	}
	if strings.Contains(err.Error(), "is a read-only mount") {
		// The shape of a container runtime's default: cgroupfs mounted ro.
		return "the container's cgroupfs is read-only: give it a writable one (runc/crun: drop \"ro\" from the /sys/fs/cgroup mount in config.json; docker/podman: --privileged, or a private cgroup namespace with a read-write /sys/fs/cgroup)" + or
	}
	denied := strings.Contains(err.Error(), "not writable") || strings.Contains(err.Error(), "permission denied")
	if os.Getuid() != 0 && os.Getenv("INVOCATION_ID") != "" && denied {
		// systemd sets INVOCATION_ID for the processes of a unit: the
		// fix is a line in that unit.
		return "this systemd unit has no delegated cgroup for stockade's user: add Delegate=memory pids cpu to its [Service] section (systemd-run: -p Delegate=yes)" + or
	}
	if os.Getuid() != 0 {
		return "a normal user needs a delegated cgroup: `stockade doctor` prints how to get one, then give it with --cgroup-parent PATH or $STOCKADE_CGROUP_PARENT" + or
	}
	if optOut {
		return "use --no-cgroup to run with rlimits only"
	}
	return "give --cgroup-parent a cgroup path of a hierarchy this host lets stockade write (`stockade doctor` says what it found)"
}
