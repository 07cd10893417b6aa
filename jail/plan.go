package jail

import (
	"fmt"
	"path"
	"strings"

	"github.com/stockade/stockade/jail/internal/jailinit"
	"github.com/stockade/stockade/rootfs"
)

// devices are the only device nodes a jail gets, bound from the host's /dev
// because an unprivileged user namespace cannot mknod.
var devices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// planInput is what the plan is made from: the spec plus what the parent
// found on the host.
type planInput struct {
	spec    Spec
	root    []rootfs.Entry
	workdir string          // host directory for /work; "" for a read-only empty /work
	custom  bool            // root is a prepared directory (not host-derived)
	bootID  string          // the run's own /proc/sys/kernel/random/boot_id
	views   []jailinit.Step // the jail's own limits (runView), after /proc exists
	extra   []jailinit.Step // the host's provisions (Host.Providers), after /proc and /tmp exist
}

// buildPlan returns the steps that make the jail's root, in order. It is
// pure, so the layout a jail gets can be read and tested without a jail.
func buildPlan(in planInput) ([]jailinit.Step, error) {
	s := in.spec
	var p []jailinit.Step
	// The root itself: a small tmpfs that only holds mount points and the
	// generated /etc files; remounted read-only after pivot_root.
	p = append(p, jailinit.Step{Kind: jailinit.StepTmpfs, Dest: "/", Mode: 0o755, Size: 1 << 20})

	hasEtc := false
	for _, e := range in.root {
		if e.Path == "/etc" {
			hasEtc = true
		}
		if e.Link != "" {
			p = append(p, jailinit.Step{Kind: jailinit.StepSymlink, Dest: e.Path, Link: e.Link})
			continue
		}
		p = append(p, jailinit.Step{Kind: jailinit.StepBind, Dest: e.Path, Source: e.Source, Dir: e.Dir, Exec: true})
	}

	// /etc: the jail's own identity files. For a host-derived root /etc is
	// part of the tmpfs; a prepared root brings its own /etc, and the
	// generated files are bound over its copies where those exist.
	etc := []jailinit.Step{
		{Kind: jailinit.StepFile, Dest: "/etc/passwd", Mode: 0o644, Data: fmt.Sprintf(
			"root:x:0:0:root:/nonexistent:/usr/sbin/nologin\n%s:x:%d:%d:stockade jail user:/work:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
			JailUser, JailUID, JailGID)},
		{Kind: jailinit.StepFile, Dest: "/etc/group", Mode: 0o644, Data: fmt.Sprintf(
			"root:x:0:\n%s:x:%d:\nnogroup:x:65534:\n", JailUser, JailGID)},
		{Kind: jailinit.StepFile, Dest: "/etc/hosts", Mode: 0o644, Data: fmt.Sprintf(
			"127.0.0.1\tlocalhost %s\n::1\tlocalhost ip6-localhost ip6-loopback\n", s.Hostname)},
		{Kind: jailinit.StepFile, Dest: "/etc/hostname", Mode: 0o644, Data: s.Hostname + "\n"},
	}
	if hasEtc && in.custom {
		for i := range etc {
			etc[i].Optional = true // only over files the prepared root has
		}
	}
	p = append(p, etc...)

	// /dev: a tmpfs with the harmless nodes, a private devpts for ptys and
	// a /dev/shm for POSIX semaphores (multiprocessing needs it).
	p = append(p, jailinit.Step{Kind: jailinit.StepTmpfs, Dest: "/dev", Mode: 0o755, Size: 64 << 10})
	for _, d := range devices {
		p = append(p, jailinit.Step{Kind: jailinit.StepBind, Dest: "/dev/" + d, Source: "/dev/" + d, Writable: true, Device: true})
	}
	p = append(p,
		jailinit.Step{Kind: jailinit.StepDevpts, Dest: "/dev/pts"},
		jailinit.Step{Kind: jailinit.StepSymlink, Dest: "/dev/ptmx", Link: "pts/ptmx"},
		jailinit.Step{Kind: jailinit.StepTmpfs, Dest: "/dev/shm", Mode: 0o1777, Size: s.TmpfsSize},
		jailinit.Step{Kind: jailinit.StepSymlink, Dest: "/dev/fd", Link: "/proc/self/fd"},
		jailinit.Step{Kind: jailinit.StepSymlink, Dest: "/dev/stdin", Link: "/proc/self/fd/0"},
		jailinit.Step{Kind: jailinit.StepSymlink, Dest: "/dev/stdout", Link: "/proc/self/fd/1"},
		jailinit.Step{Kind: jailinit.StepSymlink, Dest: "/dev/stderr", Link: "/proc/self/fd/2"},
		jailinit.Step{Kind: jailinit.StepProc, Dest: "/proc"},
	)
	p = append(p, procMasks(in.bootID)...)
	p = append(p,
		jailinit.Step{Kind: jailinit.StepTmpfs, Dest: "/tmp", Mode: 0o1777, Size: s.TmpfsSize},
	)
	p = append(p, in.views...)
	p = append(p, in.extra...)
	switch {
	case in.workdir != "":
		// The user's directory, read-only beneath a tmpfs that takes every
		// write (bounded as a fresh /work is); the parent copies the writes
		// back after the run. workUpper is detached once the overlay holds it.
		p = append(p,
			jailinit.Step{Kind: jailinit.StepTmpfs, Dest: workUpper, Mode: 0o755, Size: s.WorkSize,
				Inodes: WorkInodes(s.WorkSize), Report: true},
			jailinit.Step{Kind: jailinit.StepOverlay, Dest: "/work", Source: in.workdir, Upper: workUpper,
				Exec: s.ExecWorkdir, User: true})
	case s.WorkdirMode == WorkdirFresh:
		// A tmpfs, not a host directory: its size and inode count bound
		// what the jail can write however it writes (write, fallocate,
		// sparse files, hard links, a flood of empty files), its pages are
		// charged to the memory cgroup of the task that writes them (the
		// jail's), and it vanishes with the jail.
		p = append(p, jailinit.Step{Kind: jailinit.StepTmpfs, Dest: "/work", Mode: 0o700, Size: s.WorkSize,
			Inodes: WorkInodes(s.WorkSize), Exec: s.ExecWorkdir, Report: true})
	default:
		p = append(p, jailinit.Step{Kind: jailinit.StepDir, Dest: "/work", Mode: 0o755})
	}
	for _, b := range s.ReadOnly {
		p = append(p, jailinit.Step{Kind: jailinit.StepBind, Dest: path.Clean(b.Dest), Source: path.Clean(b.Source), User: true, Hide: true})
	}
	if err := checkPlan(p); err != nil {
		return nil, err
	}
	return p, nil
}

// workUpper is where the upper layer over a --workdir is mounted while
// the root is built; nothing is left there once the overlay holds it.
const workUpper = "/.stockade-upper"

// WorkInodes is the inode limit of a fresh /work of size bytes: one per
// 4 KiB, as many files as it has pages (every non-empty file takes one),
// at least 64 so that a small /work still holds a few files.
func WorkInodes(size int64) int64 { return max(size/4096, 64) }

// checkPlan refuses two steps with the same destination and a bind below a
// symlink the plan itself creates (which would let a path like /bin/x land
// wherever the link points).
func checkPlan(p []jailinit.Step) error {
	seen := map[string]bool{}
	links := map[string]bool{}
	for _, st := range p {
		if st.Kind == jailinit.StepFile && st.Optional {
			continue
		}
		if seen[st.Dest] && st.Dest != "/" {
			return fmt.Errorf("mount plan: %s is mounted twice", st.Dest)
		}
		seen[st.Dest] = true
		for l := range links {
			if strings.HasPrefix(st.Dest, l+"/") {
				return fmt.Errorf("mount plan: %s lies below the symlink %s", st.Dest, l)
			}
		}
		if st.Kind == jailinit.StepSymlink {
			links[st.Dest] = true
		}
	}
	return nil
}

// procMasks hide figures of the host that the kernel shows in every procfs,
// its own pid namespace's included: the boot id (which identifies the host
// and its boot across runs), the kernel command line, and the load average
// (what the host's other tenants are doing). The jail gets its own boot id,
// an empty command line and an idle load. /proc/uptime is the jail's own
// through a time namespace instead (jailinit).
func procMasks(bootID string) []jailinit.Step {
	return []jailinit.Step{
		{Kind: jailinit.StepMask, Dest: "/proc/sys/kernel/random/boot_id", Data: bootID + "\n"},
		{Kind: jailinit.StepMask, Dest: "/proc/cmdline", Data: "\n"},
		{Kind: jailinit.StepMask, Dest: "/proc/loadavg", Data: "0.00 0.00 0.00 1/1 1\n"},
	}
}
