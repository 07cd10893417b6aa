package cgroup

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// v1Controllers are the hierarchies a v1 group lives in. cpuacct is how v1
// accounts CPU time (it may be co-mounted with cpu or separate); freezer is
// optional and only makes Kill race-free against fork.
var v1Controllers = []string{"memory", "cpu", "cpuacct", "pids", "freezer"}

// v2Controllers are enabled for children in cgroup.subtree_control. CPU
// accounting and freezing are core cgroup v2 features and need no controller.
var v2Controllers = []string{"memory", "cpu", "pids"}

// limitControllers are the controllers that enforce Limits.
var limitControllers = []string{"memory", "cpu", "pids"}

// layout is what the kernel tells us about the cgroup world, before any
// decision about where our groups go.
type layout struct {
	mode    Mode
	variant string                // "unified", "hybrid" or "legacy"
	v1      map[string]mountEntry // controller -> its v1 mount
	v2      *mountEntry           // the cgroup2 mount, if any
	self    procCgroups
}

func detectHost() (layout, error) {
	mi, err := os.Open("/proc/thread-self/mountinfo")
	if err != nil {
		return layout{}, fmt.Errorf("detect cgroup mode: %w", err)
	}
	defer mi.Close()
	pc, err := os.Open("/proc/thread-self/cgroup")
	if err != nil {
		return layout{}, fmt.Errorf("detect cgroup mode: %w", err)
	}
	defer pc.Close()
	return detect(mi, pc)
}

// detect decides the mode: if any limit controller is bound to a v1
// hierarchy, it cannot be used on cgroup2 (a controller lives in one
// hierarchy at a time), so v1 it is, as on systemd's hybrid layout.
func detect(mountinfo, procCgroup io.Reader) (layout, error) {
	mounts, err := parseMountinfo(mountinfo)
	if err != nil {
		return layout{}, err
	}
	self, err := parseProcCgroup(procCgroup)
	if err != nil {
		return layout{}, err
	}
	l := layout{v1: map[string]mountEntry{}, self: self}
	anyV1 := false
	for i := range mounts {
		m := mounts[i]
		switch m.fsType {
		case "cgroup2":
			// Prefer the canonical place; a second cgroup2 mount is a bind of the same tree.
			if l.v2 == nil || m.mountPoint == "/sys/fs/cgroup" {
				l.v2 = &m
			}
		case "cgroup":
			anyV1 = true
			for _, c := range v1Controllers {
				if _, seen := l.v1[c]; !seen && slices.Contains(m.superOpts, c) {
					l.v1[c] = m
				}
			}
		}
	}
	v1Limits := false
	for _, c := range limitControllers {
		if _, ok := l.v1[c]; ok {
			v1Limits = true
		}
	}
	switch {
	case v1Limits && l.v2 != nil:
		l.mode, l.variant = V1, "hybrid"
	case v1Limits:
		l.mode, l.variant = V1, "legacy"
	case l.v2 != nil && anyV1:
		// Only named v1 hierarchies (name=systemd) beside a cgroup2 that holds the controllers.
		l.mode, l.variant = V2, "hybrid"
	case l.v2 != nil:
		l.mode, l.variant = V2, "unified"
	default:
		return layout{}, errors.New("detect cgroup mode: no cgroup or cgroup2 filesystem is mounted (see /proc/self/mountinfo)")
	}
	if l.mode == V2 && self.unified == "" {
		return layout{}, errors.New("detect cgroup mode: cgroup2 is mounted but /proc/self/cgroup has no 0:: line")
	}
	return l, nil
}

// hostDir turns a cgroup path as /proc/self/cgroup shows it into a directory
// under the mount. A mount may show only part of the tree (a container's
// bind of its own cgroup), so the path is taken relative to the mount's root.
func hostDir(m mountEntry, cgPath string) (string, error) {
	rel, err := filepath.Rel(m.root, cgPath)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("our cgroup %s is outside what %s shows (mount root %s)", cgPath, m.mountPoint, m.root)
	}
	return filepath.Join(m.mountPoint, rel), nil
}

// parentDir resolves Options.Parent (relative to the mount root) under a
// mount, refusing paths that climb out of it.
func parentDir(m mountEntry, parent string) (string, error) {
	clean := filepath.Clean("/" + parent)
	if slices.Contains(strings.Split(parent, "/"), "..") {
		return "", fmt.Errorf("cgroup parent %q must not contain \"..\"", parent)
	}
	return filepath.Join(m.mountPoint, clean), nil
}
