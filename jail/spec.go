package jail

import (
	"errors"
	"fmt"
	"github.com/stockade/stockade/jail/internal/initproc"
	"path"
	"strings"
	"time"
)

// Identity of the jailed user inside the jail. Run as root, stockade maps it
// to HostID on the host (never to host root); run as a normal user, to that
// user.
const (
	JailUID  = initproc.JailUID
	JailGID  = initproc.JailGID
	JailUser = "sandbox"
	// HostID is the host uid and gid the jail user becomes when stockade runs
	// as root: far above any range useradd, systemd's dynamic users or
	// subuid(5) hand out, so it owns nothing on the host but the run's /work.
	HostID = initproc.HostID
)

// Workdir modes for Spec.WorkdirMode.
const (
	WorkdirFresh = "fresh" // a new empty host directory, removed afterwards
	WorkdirNone  = "none"  // /work exists but is an empty read-only directory
)

// Spec is everything one run is made of. It is plain data: Validate checks it
// once, and Run never changes it.
type Spec struct {
	Args []string // the command; Args[0] is looked up in PATH inside the jail
	Env  []string // KEY=VALUE added to the jail's minimal environment

	Timeout     time.Duration // wall clock, from the start of the run
	OutputLimit int64         // bytes kept per stream; the rest is drained and dropped

	Rootfs      string // "" or "host": derived from the host; otherwise a prepared root directory
	TmpfsSize   int64  // bytes for /tmp (and /dev/shm)
	Workdir     string // host directory bound at /work; "" means WorkdirMode decides
	WorkdirMode string // WorkdirFresh (default) or WorkdirNone; ignored when Workdir is set
	ExecWorkdir bool   // allow exec from /work (default: noexec)
	ReadOnly    []Bind // extra read-only binds
	Hostname    string

	Rlimits Rlimits
	Cgroup  CgroupSpec

	// Seccomp names the syscall policy; "off" disables the filter (reported
	// as degraded).
	Seccomp string
}

// Bind is a host path made visible read-only inside the jail.
type Bind struct {
	Source string // absolute host path, resolved without following symlinks
	Dest   string // absolute path inside the jail
}

// Rlimits are the per-process limits set before the payload starts. Zero
// means the jail's default, not unlimited.
type Rlimits struct {
	OpenFiles uint64 // RLIMIT_NOFILE
	FileSize  uint64 // RLIMIT_FSIZE, bytes
	CPUTime   uint64 // RLIMIT_CPU, seconds: a backstop under the cgroup poll
}

// CgroupSpec holds the limits that need a cgroup. Zero fields get the
// defaults (512M, no swap, 1 CPU, 128 pids). Disabled means --no-cgroup:
// the run goes ahead with rlimits only and says so in Result.Degraded.
type CgroupSpec struct {
	Disabled  bool
	Parent    string // "" = stockade's own cgroup
	MemoryMax int64  // bytes
	SwapMax   int64  // bytes on top of MemoryMax
	CPUs      float64
	PidsMax   int64
	CPUTime   time.Duration // CPU time of the whole tree, polled from the cgroup
}

// Defaults used where a Spec leaves a field zero.
const (
	DefaultTimeout     = 10 * time.Second
	DefaultOutputLimit = 1 << 20
	DefaultTmpfsSize   = 64 << 20
	DefaultOpenFiles   = 256
	DefaultFileSize    = 64 << 20
	DefaultHostname    = "stockade"
	DefaultSeccomp     = "python"
)

// WithDefaults returns s with every zero field set to the safe default.
func (s Spec) WithDefaults() Spec {
	if s.Timeout == 0 {
		s.Timeout = DefaultTimeout
	}
	if s.OutputLimit == 0 {
		s.OutputLimit = DefaultOutputLimit
	}
	if s.TmpfsSize == 0 {
		s.TmpfsSize = DefaultTmpfsSize
	}
	if s.WorkdirMode == "" {
		s.WorkdirMode = WorkdirFresh
	}
	if s.Hostname == "" {
		s.Hostname = DefaultHostname
	}
	if s.Rlimits.OpenFiles == 0 {
		s.Rlimits.OpenFiles = DefaultOpenFiles
	}
	if s.Rlimits.FileSize == 0 {
		s.Rlimits.FileSize = DefaultFileSize
	}
	if s.Seccomp == "" {
		s.Seccomp = DefaultSeccomp
	}
	if !s.Cgroup.Disabled {
		if s.Cgroup.MemoryMax == 0 {
			s.Cgroup.MemoryMax = DefaultMemoryMax
		}
		if s.Cgroup.CPUs == 0 {
			s.Cgroup.CPUs = DefaultCPUs
		}
		if s.Cgroup.PidsMax == 0 {
			s.Cgroup.PidsMax = DefaultPidsMax
		}
	}
	if c := s.Cgroup.CPUTime; c > 0 && s.Rlimits.CPUTime == 0 {
		// The per-process backstop under the cgroup poll: a little more
		// than the limit, so the poll normally ends the run first.
		s.Rlimits.CPUTime = uint64(c/time.Second) + 2
	}
	return s
}

// reservedDests are the jail paths stockade itself mounts; a --ro bind onto
// one of them (or below /proc and /dev) would hide or replace them.
var reservedDests = []string{"/", "/proc", "/dev", "/tmp", "/work", "/etc/passwd", "/etc/group", "/etc/hosts"}

// Validate reports the first problem that would stop the run, naming the
// field. It does not touch the filesystem: path checks that need the host
// happen when the run starts.
func (s *Spec) Validate() error {
	if len(s.Args) == 0 || s.Args[0] == "" {
		return errors.New("no command given")
	}
	for _, kv := range s.Env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsAny(k, "\x00") {
			return fmt.Errorf("env %q: want KEY=VALUE", kv)
		}
	}
	if s.Timeout < 0 {
		return fmt.Errorf("timeout %v: must be positive", s.Timeout)
	}
	if s.OutputLimit < 0 {
		return fmt.Errorf("output limit %d: must not be negative", s.OutputLimit)
	}
	if s.TmpfsSize < 0 {
		return fmt.Errorf("tmpfs size %d: must not be negative", s.TmpfsSize)
	}
	switch s.WorkdirMode {
	case "", WorkdirFresh, WorkdirNone:
	default:
		return fmt.Errorf("workdir mode %q: want %q or %q", s.WorkdirMode, WorkdirFresh, WorkdirNone)
	}
	if s.Workdir != "" && !path.IsAbs(s.Workdir) {
		return fmt.Errorf("workdir %q: must be an absolute path", s.Workdir)
	}
	if s.Rootfs != "" && s.Rootfs != "host" && !path.IsAbs(s.Rootfs) {
		return fmt.Errorf("rootfs %q: must be \"host\" or an absolute path", s.Rootfs)
	}
	if strings.ContainsAny(s.Hostname, "/\x00") || len(s.Hostname) > 64 {
		return fmt.Errorf("hostname %q: not a valid host name", s.Hostname)
	}
	for _, b := range s.ReadOnly {
		if err := b.validate(); err != nil {
			return err
		}
	}
	c := s.Cgroup
	if c.MemoryMax < 0 || c.SwapMax < 0 || c.PidsMax < 0 || c.CPUs < 0 || c.CPUTime < 0 {
		return errors.New("cgroup limits must not be negative")
	}
	return nil
}

func (b Bind) validate() error {
	if !path.IsAbs(b.Source) {
		return fmt.Errorf("--ro %s: source must be an absolute path", b.Source)
	}
	if !path.IsAbs(b.Dest) {
		return fmt.Errorf("--ro %s:%s: destination must be an absolute path", b.Source, b.Dest)
	}
	dst := path.Clean(b.Dest)
	for _, r := range reservedDests {
		if dst == r {
			return fmt.Errorf("--ro %s:%s: %s is managed by stockade", b.Source, b.Dest, r)
		}
	}
	for _, r := range []string{"/proc/", "/dev/"} {
		if strings.HasPrefix(dst, r) {
			return fmt.Errorf("--ro %s:%s: nothing may be bound below %s", b.Source, b.Dest, r)
		}
	}
	return nil
}

// ParseBind parses a --ro argument, SRC or SRC:DST.
func ParseBind(arg string) (Bind, error) {
	src, dst, ok := strings.Cut(arg, ":")
	if !ok {
		dst = src
	}
	b := Bind{Source: path.Clean(src), Dest: path.Clean(dst)}
	if src == "" || dst == "" {
		return Bind{}, fmt.Errorf("--ro %q: want SRC or SRC:DST", arg)
	}
	return b, b.validate()
}
