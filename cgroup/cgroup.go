package cgroup

import (
	"fmt"
	"time"
)

// Mode is the cgroup world the limits are enforced in.
type Mode string

const (
	// V1 means the legacy per-controller hierarchies (also on hybrid hosts,
	// where cgroup2 is mounted but holds none of the controllers we need).
	V1 Mode = "v1"
	// V2 means the unified hierarchy.
	V2 Mode = "v2"
)

// cfsPeriod is the CFS bandwidth period for CPU limits; the kernel's own
// default, so a quota of CPUs*period reads the same as the flag.
const cfsPeriod = 100 * time.Millisecond

// maxCPUs keeps CPUs*period far from overflowing a time.Duration.
const maxCPUs = 1 << 30

// minCFSQuota is the kernel's lower bound for cpu.max / cpu.cfs_quota_us.
const minCFSQuota = time.Millisecond

// MinCPUs is the smallest CPU limit the kernel takes: minCFSQuota per
// cfsPeriod. A profile's validation refuses less, naming the field, rather
// than leave it to the cgroup's creation.
const MinCPUs = float64(minCFSQuota) / float64(cfsPeriod)

// Limits are the hard limits of one group. A zero field means no limit,
// except SwapMax, where zero means no swap at all.
type Limits struct {
	MemoryMax int64   // bytes of memory, 0 = no limit
	SwapMax   int64   // bytes of swap on top of MemoryMax; 0 = no swap
	CPUs      float64 // CPU bandwidth in cores, 0 = no limit
	PidsMax   int64   // tasks (processes and threads), 0 = no limit
}

// validate rejects values the kernel would refuse or silently misread.
func (l Limits) validate() error {
	switch {
	case l.MemoryMax < 0:
		return fmt.Errorf("memory limit %d is negative", l.MemoryMax)
	case l.SwapMax < 0:
		return fmt.Errorf("swap limit %d is negative", l.SwapMax)
	case l.PidsMax < 0:
		return fmt.Errorf("pids limit %d is negative", l.PidsMax)
	case l.CPUs < 0:
		return fmt.Errorf("cpu limit %g is negative", l.CPUs)
	case l.CPUs > maxCPUs:
		return fmt.Errorf("cpu limit %g is more than %d cpus", l.CPUs, maxCPUs)
	case l.CPUs > 0 && l.cfsQuota() < minCFSQuota:
		return fmt.Errorf("cpu limit %g is below the kernel's minimum quota of %v per %v period (%.2f cpus)",
			l.CPUs, minCFSQuota, cfsPeriod, float64(minCFSQuota)/float64(cfsPeriod))
	}
	return nil
}

// cfsQuota is the CPU time the group may use per cfsPeriod.
func (l Limits) cfsQuota() time.Duration {
	return time.Duration(l.CPUs * float64(cfsPeriod))
}

// Options configure a Manager.
type Options struct {
	// Parent is where stockade.* groups are created, relative to the cgroup
	// mount root (as systemd or a --cgroup-parent flag names it). Empty means
	// the cgroup stockade itself runs in, per hierarchy on v1.
	Parent string
	// Logf receives notices about what the manager changed or could not do,
	// such as moving stockade into <own>/supervisor. May be nil.
	Logf func(format string, a ...any)

	// subdir, when set, nests the parent one level deeper in every
	// hierarchy and creates that level. Tests use it so that a Manager's
	// stale sweep sees only the test's own groups, never a concurrently
	// running stockade's.
	subdir string
}

// Stats is what a group used, read after (or during) a run.
type Stats struct {
	MemoryPeak     uint64        // highest memory use in bytes
	MemoryNow      uint64        // memory use when read
	PidsNow        uint64        // tasks when read
	CPUUsage       time.Duration // user+system CPU time of every task in the group
	UserCPU        time.Duration
	SystemCPU      time.Duration
	PidsPeak       uint64 // highest number of tasks; 0 if the kernel does not track it
	OOMKills       uint64 // tasks the kernel OOM killer killed in the group
	PidsLimitHit   bool   // a fork or clone failed because pids.max was reached
	MemoryLimitHit bool   // the group reached its memory limit at least once (it may have reclaimed and carried on)
}
