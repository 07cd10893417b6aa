package cgroup

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// primary is the first usable hierarchy (memory's on v1).
func (m *Manager) primary() *hierarchy {
	for _, h := range m.hiers {
		if h.err == nil {
			return h
		}
	}
	return nil
}

// RemoveStale kills whatever is left in the given directories of one group
// (one per hierarchy, as GroupDirs named them) and removes them; missing
// ones are skipped. It trusts the caller to have proved the group's owner
// gone (package runlock: the owner's lock is free) and checks only that
// every path is a stockade group on a cgroup filesystem, so that a damaged
// record cannot make it remove anything else. It returns how many
// processes it killed.
func RemoveStale(dirs []string) (int, error) {
	var g *Group
	for _, dir := range dirs {
		if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir || !strings.HasPrefix(filepath.Base(dir), groupPrefix) {
			return 0, fmt.Errorf("remove stale cgroup %s: not a stockade group path", dir)
		}
		var fs unix.Statfs_t
		if err := unix.Statfs(dir, &fs); err != nil {
			if err == unix.ENOENT {
				continue
			}
			return 0, fmt.Errorf("remove stale cgroup %s: %w", dir, err)
		}
		mode := V1
		switch fs.Type {
		case unix.CGROUP2_SUPER_MAGIC:
			mode = V2
		case unix.CGROUP_SUPER_MAGIC:
		default:
			return 0, fmt.Errorf("remove stale cgroup %s: not on a cgroup filesystem", dir)
		}
		if g == nil {
			g = &Group{mode: mode, name: filepath.Base(dir), pathFD: -1}
		}
		g.dirs = append(g.dirs, dir)
		// Only the freezer matters to Kill on v1; the other controllers'
		// directories are just emptied and removed.
		if exists(filepath.Join(dir, "freezer.state")) {
			g.freezerDir = dir
		}
	}
	if g == nil {
		return 0, nil
	}
	procs, _ := g.procsLeft()
	if err := g.Delete(); err != nil {
		return len(procs), err
	}
	return len(procs), nil
}

// stockadeGroups lists the stockade.* groups directly in dir, for tests.
func stockadeGroups(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), groupPrefix) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}
