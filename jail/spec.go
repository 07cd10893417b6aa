package jail

import (
	"errors"
	"fmt"
	"math"
	"path"
	"strings"
	"time"

	"github.com/stockade/stockade/jail/internal/jailinit"
)

// Identity of the jailed user inside the jail. Run as root, stockade maps it
// to a host id of its own per concurrent run, from HostID up (never to host
// root); run as a normal user, to that user.
const (
	JailUID  = jailinit.JailUID
	JailGID  = jailinit.JailGID
	JailUser = "sandbox"
	// HostID is the base of the host uids and gids the jail user becomes
	// when stockade runs as root, one per concurrent run (HostID+1 plus the
	// run's host-wide number, runlock.AcquireID, up to
	// HostID+runlock.MaxSlots): in the range systemd leaves unused, far
	// above any range useradd, systemd's dynamic users or subuid(5) hand
	// out, so it owns nothing on the host but the run's /work.
	HostID = jailinit.HostID
)

// Workdir modes for Spec.WorkdirMode.
const (
	WorkdirFresh = "fresh" // a new empty host directory, removed afterwards
	WorkdirNone  = "none"  // /work exists but is an empty read-only directory
)

// RootfsHost is the Spec.Rootfs value for a root derived from the host's.
const RootfsHost = "host"

// SeccompOff is the Spec.Seccomp value that loads no filter.
const SeccompOff = "off"

// Isolation tiers for Spec.Isolation (docs/isolation.md).
const (
	IsolationJail = "jail" // namespaces, cgroup and seccomp on the host's kernel
	// IsolationVM runs the same jail inside a guest kernel of its own
	// (package vmtier); jail.Run refuses such a Spec, so that a caller
	// that does not know the tier never runs it with one wall less.
	IsolationVM = "vm"
)

// Spec is everything one run is made of. It is plain data and complete: no
// field has a default, every one is set by whoever builds the Spec
// (stockade itself always through profiles.Profile.Spec, its one builder),
// and Validate refuses a zero where zero would mean nothing. Run never
// changes it.
type Spec struct {
	Args []string // the command; Args[0] is looked up in PATH inside the jail
	// Env is KEY=VALUE added to the jail's fixed environment (PATH, HOME,
	// LANG, ...); a key given here replaces the fixed one. Keys are unique.
	Env []string

	Timeout     time.Duration // wall clock, from the start of the run; > 0
	OutputLimit int64         // bytes kept per stream, > 0; the rest is drained and dropped

	Rootfs      string // RootfsHost, or a prepared root directory (absolute)
	TmpfsSize   int64  // bytes for /tmp and /dev/shm, each; > 0
	Workdir     string // host directory bound at /work; "" means WorkdirMode decides
	WorkdirMode string // WorkdirFresh or WorkdirNone; ignored when Workdir is set
	ExecWorkdir bool   // allow exec from /work (false: noexec)
	// WorkSize bounds what the run may write to /work, in bytes, > 0: a
	// fresh /work is a tmpfs of this size (charged to the run's memory
	// cgroup) with WorkInodes(WorkSize) inodes, and a Workdir is an overlay
	// whose writes land in such a tmpfs and are copied back after the run.
	WorkSize int64
	ReadOnly []Bind // extra read-only binds
	Hostname string // the jail's host name, non-empty

	Rlimits Rlimits
	Cgroup  CgroupSpec

	// Seccomp names the syscall policy; SeccompOff disables the filter
	// (reported as degraded).
	Seccomp string

	// Network is what the jail may reach through its egress proxy; the
	// zero value is no network (loopback only).
	Network NetworkSpec

	// Isolation is the tier: IsolationJail (or "") or IsolationVM. VMEmulate
	// lets the VM tier run under software emulation (TCG) where the host
	// has no /dev/kvm; it means nothing to the jail tier.
	Isolation string
	VMEmulate bool

	// Host is the machine's part: where the cgroup goes, stockade's own
	// upstream proxy, its state directories. It is the same for every run
	// of a process, and no policy (profile, flag, request) sets it.
	Host Host
}

// Bind is a host path made visible read-only inside the jail.
type Bind struct {
	Source string // absolute host path, resolved without following symlinks
	Dest   string // absolute path inside the jail
}

// Rlimits are the per-process limits set before the payload starts.
type Rlimits struct {
	OpenFiles uint64 // RLIMIT_NOFILE, at least 3 (stdin, stdout, stderr)
	FileSize  uint64 // RLIMIT_FSIZE in bytes; 0 is no limit (RLIM_INFINITY)
}

// CgroupSpec holds the limits that need a cgroup. Without one
// (Host.NoCgroup) they are neither enforced nor reported.
type CgroupSpec struct {
	MemoryMax int64         // bytes, > 0
	SwapMax   int64         // bytes on top of MemoryMax; 0 is no swap
	CPUs      float64       // CPUs' worth of bandwidth, > 0
	PidsMax   int64         // tasks at once, > 0
	CPUTime   time.Duration // CPU time of the whole tree; 0 is no limit
}

// reservedDests are the jail paths stockade itself mounts or generates. A
// bind onto one would hide or replace it; a bind below /proc, /dev or /sys
// would reach past the kernel interfaces the jail mounts itself; and a bind
// below /work would make its mount point in /work, which with --workdir is
// the user's own directory on the host.
var reservedDests = []string{"/", "/proc", "/dev", "/sys", "/tmp", "/work",
	"/etc/passwd", "/etc/group", "/etc/hosts", "/etc/hostname"}

// reservedTrees are reserved with everything below them.
var reservedTrees = []string{"/proc", "/dev", "/sys", "/work"}

// CheckBindDest says why dest may not be a bind's destination in the jail,
// or returns nil. It is the one list of the paths stockade manages: the
// profile validator asks it too, so a flag and a file are refused alike.
func CheckBindDest(dest string) error {
	if !path.IsAbs(dest) || path.Clean(dest) != dest || strings.IndexByte(dest, 0) >= 0 {
		return fmt.Errorf("destination %q must be an absolute, clean path", dest)
	}
	for _, r := range reservedTrees {
		if strings.HasPrefix(dest, r+"/") {
			return fmt.Errorf("destination %q is inside %s, which stockade mounts itself", dest, r)
		}
	}
	for _, r := range reservedDests {
		if dest == r {
			return fmt.Errorf("destination %q is managed by stockade", dest)
		}
	}
	return nil
}

// Validate reports the first problem that would stop the run, naming the
// field. It does not touch the filesystem: path checks that need the host
// happen when the run starts.
func (s *Spec) Validate() error {
	if len(s.Args) == 0 || s.Args[0] == "" {
		return errors.New("no command given")
	}
	seen := make(map[string]bool, len(s.Env))
	for _, kv := range s.Env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsAny(kv, "\x00") {
			return fmt.Errorf("env %q: want KEY=VALUE", kv)
		}
		if seen[k] {
			return fmt.Errorf("env %s: given twice", k)
		}
		seen[k] = true
	}
	switch s.Isolation {
	case "", IsolationJail, IsolationVM:
	default:
		return fmt.Errorf("isolation %q: want %q or %q", s.Isolation, IsolationJail, IsolationVM)
	}
	if s.Timeout <= 0 {
		return fmt.Errorf("timeout %v: must be more than 0", s.Timeout)
	}
	if s.OutputLimit <= 0 {
		return fmt.Errorf("output limit %d: must be more than 0", s.OutputLimit)
	}
	if s.TmpfsSize <= 0 {
		return fmt.Errorf("tmpfs size %d: must be more than 0", s.TmpfsSize)
	}
	if s.WorkSize < 0 {
		return fmt.Errorf("work size %d: must not be negative", s.WorkSize)
	}
	if s.WorkSize <= 0 {
		return fmt.Errorf("work size %d: must be more than 0", s.WorkSize)
	}
	switch s.WorkdirMode {
	case WorkdirFresh, WorkdirNone:
	default:
		return fmt.Errorf("workdir mode %q: want %q or %q", s.WorkdirMode, WorkdirFresh, WorkdirNone)
	}
	if s.Workdir != "" && !path.IsAbs(s.Workdir) {
		return fmt.Errorf("workdir %q: must be an absolute path", s.Workdir)
	}
	if s.Rootfs != RootfsHost && !path.IsAbs(s.Rootfs) {
		return fmt.Errorf("rootfs %q: must be %q or an absolute path", s.Rootfs, RootfsHost)
	}
	if err := s.Host.validate(); err != nil {
		return err
	}
	if s.Hostname == "" || strings.ContainsAny(s.Hostname, "/\x00") || len(s.Hostname) > 64 {
		return fmt.Errorf("hostname %q: not a valid host name", s.Hostname)
	}
	for _, b := range s.ReadOnly {
		if !path.IsAbs(b.Source) || strings.IndexByte(b.Source, 0) >= 0 {
			return fmt.Errorf("ro %s:%s: source must be an absolute path", b.Source, b.Dest)
		}
		if err := CheckBindDest(b.Dest); err != nil {
			return fmt.Errorf("ro %s:%s: %w", b.Source, b.Dest, err)
		}
	}
	if s.Rlimits.OpenFiles < 3 {
		return fmt.Errorf("open files %d: must be at least 3", s.Rlimits.OpenFiles)
	}
	if s.Seccomp == "" {
		return errors.New("seccomp: no policy named (use \"off\" for none)")
	}
	if err := s.Network.validate(); err != nil {
		return err
	}
	if s.Network.Enabled() && s.Host.UpstreamProxy != "" {
		if _, err := upstreamURL(s.Host.UpstreamProxy); err != nil {
			return err
		}
	}
	c := s.Cgroup
	if c.MemoryMax <= 0 || c.PidsMax <= 0 || !(c.CPUs > 0) || math.IsInf(c.CPUs, 0) {
		return fmt.Errorf("cgroup limits (memory %d, pids %d, cpus %v) must be more than 0", c.MemoryMax, c.PidsMax, c.CPUs)
	}
	if c.SwapMax < 0 || c.CPUTime < 0 {
		return errors.New("cgroup swap and CPU time must not be negative")
	}
	return nil
}
