package jail

import (
	"fmt"
	"path"
	"strings"

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
	workdir string // host directory for /work; "" for a read-only empty /work
	custom  bool   // root is a prepared directory (not host-derived)
}

// buildPlan returns the steps that make the jail's root, in order. It is
// pure, so the layout a jail gets can be read and tested without a jail.
func buildPlan(in planInput) ([]step, error) {
	s := in.spec
	var p []step
	// The root itself: a small tmpfs that only holds mount points and the
	// generated /etc files; remounted read-only after pivot_root.
	p = append(p, step{Kind: stepTmpfs, Dest: "/", Mode: 0o755, Size: 1 << 20})

	hasEtc := false
	for _, e := range in.root {
		if e.Path == "/etc" {
			hasEtc = true
		}
		if e.Link != "" {
			p = append(p, step{Kind: stepSymlink, Dest: e.Path, Link: e.Link})
			continue
		}
		p = append(p, step{Kind: stepBind, Dest: e.Path, Source: e.Source, Dir: e.Dir, Exec: true})
	}

	// /etc: the jail's own identity files. For a host-derived root /etc is
	// part of the tmpfs; a prepared root brings its own /etc, and the
	// generated files are bound over its copies where those exist.
	etc := []step{
		{Kind: stepFile, Dest: "/etc/passwd", Mode: 0o644, Data: fmt.Sprintf(
			"root:x:0:0:root:/nonexistent:/usr/sbin/nologin\n%s:x:%d:%d:stockade jail user:/work:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
			JailUser, JailUID, JailGID)},
		{Kind: stepFile, Dest: "/etc/group", Mode: 0o644, Data: fmt.Sprintf(
			"root:x:0:\n%s:x:%d:\nnogroup:x:65534:\n", JailUser, JailGID)},
		{Kind: stepFile, Dest: "/etc/hosts", Mode: 0o644, Data: fmt.Sprintf(
			"127.0.0.1\tlocalhost %s\n::1\tlocalhost ip6-localhost ip6-loopback\n", s.Hostname)},
		{Kind: stepFile, Dest: "/etc/hostname", Mode: 0o644, Data: s.Hostname + "\n"},
	}
	if hasEtc && in.custom {
		for i := range etc {
			etc[i].Optional = true // only over files the prepared root has
		}
	}
	p = append(p, etc...)

	// /dev: a tmpfs with the harmless nodes, a private devpts for ptys and
	// a /dev/shm for POSIX semaphores (multiprocessing needs it).
	p = append(p, step{Kind: stepTmpfs, Dest: "/dev", Mode: 0o755, Size: 64 << 10})
	for _, d := range devices {
		p = append(p, step{Kind: stepBind, Dest: "/dev/" + d, Source: "/dev/" + d, Writable: true, Device: true})
	}
	p = append(p,
		step{Kind: stepDevpts, Dest: "/dev/pts"},
		step{Kind: stepSymlink, Dest: "/dev/ptmx", Link: "pts/ptmx"},
		step{Kind: stepTmpfs, Dest: "/dev/shm", Mode: 0o1777, Size: s.TmpfsSize},
		step{Kind: stepSymlink, Dest: "/dev/fd", Link: "/proc/self/fd"},
		step{Kind: stepSymlink, Dest: "/dev/stdin", Link: "/proc/self/fd/0"},
		step{Kind: stepSymlink, Dest: "/dev/stdout", Link: "/proc/self/fd/1"},
		step{Kind: stepSymlink, Dest: "/dev/stderr", Link: "/proc/self/fd/2"},
		step{Kind: stepProc, Dest: "/proc"},
		step{Kind: stepTmpfs, Dest: "/tmp", Mode: 0o1777, Size: s.TmpfsSize},
	)
	if in.workdir != "" {
		p = append(p, step{Kind: stepBind, Dest: "/work", Source: in.workdir, Dir: true,
			Writable: true, Exec: s.ExecWorkdir, User: s.Workdir != ""})
	} else {
		p = append(p, step{Kind: stepDir, Dest: "/work", Mode: 0o755})
	}
	for _, b := range s.ReadOnly {
		p = append(p, step{Kind: stepBind, Dest: path.Clean(b.Dest), Source: path.Clean(b.Source), User: true, Hide: true})
	}
	if err := checkPlan(p); err != nil {
		return nil, err
	}
	return p, nil
}

// checkPlan refuses two steps with the same destination and a bind below a
// symlink the plan itself creates (which would let a path like /bin/x land
// wherever the link points).
func checkPlan(p []step) error {
	seen := map[string]bool{}
	links := map[string]bool{}
	for _, st := range p {
		if st.Kind == stepFile && st.Optional {
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
		if st.Kind == stepSymlink {
			links[st.Dest] = true
		}
	}
	return nil
}
