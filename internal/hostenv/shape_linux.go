package hostenv

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Shape is what the kernel shows of the place stockade runs in.
type Shape struct {
	UID            int
	UIDMap, GIDMap IDMap
	// MissingCaps are the capabilities a root stockade needs to map the
	// jail to an id of its own, absent from the effective set.
	MissingCaps []string
	// ProcMasks are mounts over parts of /proc (a runtime's maskedPaths
	// and readonlyPaths); with any of them, the kernel refuses the jail a
	// procfs of its own (mount_too_revealing).
	ProcMasks []string
	// CgroupMounts are the cgroup and cgroup2 mount points, and
	// CgroupReadOnly those mounted read-only.
	CgroupMounts, CgroupReadOnly []string
	// CgroupRoot: every line of /proc/self/cgroup says "/", as inside a
	// private cgroup namespace (or in the root cgroup itself).
	CgroupRoot bool
	// SeccompFilter: a filter was already applied to stockade (a runtime's
	// default profile); the jail's is stacked on it.
	SeccompFilter bool
	// AppArmor is the confining profile, "" when unconfined or absent.
	AppArmor string
}

// MappingCaps are needed by a root stockade to give the jail an id other
// than its own: CAP_SETUID and CAP_SETGID to write the jail's uid_map and
// gid_map with it, CAP_CHOWN to hand it the run's /work.
var MappingCaps = []struct {
	Bit  int
	Name string
}{{unix.CAP_SETUID, "CAP_SETUID"}, {unix.CAP_SETGID, "CAP_SETGID"}, {unix.CAP_CHOWN, "CAP_CHOWN"}}

// MissingMappingCaps lists the MappingCaps the effective set lacks, as a
// container runtime's default set does (runc's default spec keeps only
// CAP_AUDIT_WRITE, CAP_KILL and CAP_NET_BIND_SERVICE).
func MissingMappingCaps() ([]string, error) {
	var missing []string
	for _, c := range MappingCaps {
		ok, err := HasEffectiveCap(c.Bit)
		if err != nil {
			return nil, err
		}
		if !ok {
			missing = append(missing, c.Name)
		}
	}
	return missing, nil
}

// HasEffectiveCap reports whether capability bit is in the effective set.
func HasEffectiveCap(bit int) (bool, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false, fmt.Errorf("capget: %w", err)
	}
	return data[bit/32].Effective&(1<<(uint(bit)%32)) != 0, nil
}

// Detect reads the shape from /proc.
func Detect() (Shape, error) {
	s := Shape{UID: os.Getuid()}
	var err error
	if s.UIDMap, err = ReadIDMap("/proc/self/uid_map"); err != nil {
		return s, err
	}
	if s.GIDMap, err = ReadIDMap("/proc/self/gid_map"); err != nil {
		return s, err
	}
	if s.UID == 0 {
		if s.MissingCaps, err = MissingMappingCaps(); err != nil {
			return s, err
		}
	}
	if err := s.readMounts("/proc/self/mountinfo"); err != nil {
		return s, err
	}
	if b, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		s.CgroupRoot = true
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if f := strings.SplitN(line, ":", 3); len(f) == 3 && f[2] != "/" {
				s.CgroupRoot = false
			}
		}
	}
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		s.SeccompFilter = strings.Contains(string(b), "\nSeccomp:\t2\n")
	}
	for _, p := range []string{"/proc/self/attr/apparmor/current", "/proc/self/attr/current"} {
		if b, err := os.ReadFile(p); err == nil {
			label := strings.TrimSpace(strings.TrimRight(string(b), "\x00"))
			if label != "" && label != "unconfined" && !strings.HasPrefix(label, "system_u:") {
				s.AppArmor = label
			}
			break
		}
	}
	return s, nil
}

func (s *Shape) readMounts(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent maj:min root mountpoint options [optional...] - fstype source superoptions
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 6 || len(tail) < 1 {
			continue
		}
		mnt, opts, fstype := fields[4], fields[5], tail[0]
		// binfmt_misc sits on a permanently empty directory, which the
		// kernel does not count against a new procfs.
		if strings.HasPrefix(mnt, "/proc/") && mnt != "/proc/sys/fs/binfmt_misc" {
			s.ProcMasks = append(s.ProcMasks, mnt)
		}
		if fstype == "cgroup" || fstype == "cgroup2" {
			s.CgroupMounts = append(s.CgroupMounts, mnt)
			if strings.HasPrefix(opts, "ro,") || opts == "ro" {
				s.CgroupReadOnly = append(s.CgroupReadOnly, mnt)
			}
		}
	}
	return sc.Err()
}

// InUserNamespace reports whether stockade is not in the initial user
// namespace, the one that maps every id to itself.
func (s Shape) InUserNamespace() bool {
	return !(len(s.UIDMap) == 1 && s.UIDMap[0] == IDRange{Inside: 0, Outside: 0, Count: 4294967295})
}

// Describe says, a line each, which shape this is and, where a shape stops
// the default jail, the fix.
func (s Shape) Describe() []string {
	var lines []string
	add := func(format string, a ...any) { lines = append(lines, "shape: "+fmt.Sprintf(format, a...)) }
	switch {
	case !s.InUserNamespace():
		add("initial user namespace (a host, or a container without a user namespace)")
	case len(s.UIDMap) == 1 && s.UIDMap[0].Count == 1:
		add("user namespace mapping only one id (%s): the rootless-podman / CI-runner shape; the jail user becomes that id, which needs CAP_SETFCAP (--cap-add=SETFCAP)", s.UIDMap.Describe())
	default:
		var n uint64
		for _, r := range s.UIDMap {
			n += uint64(r.Count)
		}
		add("user namespace mapping %d ids (%s)", n, s.UIDMap.Describe())
	}
	if len(s.MissingCaps) > 0 {
		add("root without %s: a container with the runtime's default capabilities; the jail cannot start (fix: --cap-add=SETUID --cap-add=SETGID --cap-add=CHOWN, or run as a non-root user)", strings.Join(s.MissingCaps, ", "))
	}
	if len(s.ProcMasks) > 0 {
		ex := s.ProcMasks[0]
		add("%d mounts over /proc (%s, ...): a runtime's masked paths; the jail cannot mount its own /proc (fix: docker --security-opt systempaths=unconfined; podman --security-opt unmask=ALL; runc/crun: empty maskedPaths and readonlyPaths)", len(s.ProcMasks), ex)
	}
	if s.SeccompFilter {
		add("a seccomp filter is already applied (a runtime's profile): the jail's is stacked on it; if it refuses clone/unshare of namespaces the jail cannot start (fix: docker/podman --security-opt seccomp=unconfined, or a profile allowing them)")
	}
	if s.AppArmor != "" {
		add("confined by AppArmor profile %q: its mount rules apply to the jail's set-up", s.AppArmor)
	}
	switch {
	case len(s.CgroupMounts) == 0:
		add("no cgroup filesystem mounted: only --no-cgroup runs (fix: mount cgroupfs, or run stockade outside the container's restrictions)")
	case len(s.CgroupReadOnly) > 0:
		add("cgroupfs read-only (%s): no cgroup limits from inside (fix: a read-write /sys/fs/cgroup, or --no-cgroup to run with rlimits only)", strings.Join(s.CgroupReadOnly, ", "))
	case s.CgroupRoot:
		add("our cgroup shows as / in every hierarchy (a private cgroup namespace, or the root cgroup), cgroupfs read-write: groups go below it")
	default:
		add("cgroupfs read-write")
	}
	return lines
}
