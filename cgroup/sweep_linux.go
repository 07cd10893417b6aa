package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// primary is the hierarchy whose group directories carry the ownership
// lock: the first usable one, memory's on v1.
func (m *Manager) primary() *hierarchy {
	for _, h := range m.hiers {
		if h.err == nil {
			return h
		}
	}
	return nil
}

// sweep removes stockade-* groups that no live stockade holds: a stockade
// that crashed or was SIGKILLed left them, perhaps with jailed processes
// still inside, which are killed first. A group whose lock is held belongs
// to a concurrently running stockade (possibly between its run and its
// Stats, with the group empty) and is left alone. Nothing without the
// stockade- prefix is ever touched.
func (m *Manager) sweep() {
	p := m.primary()
	if p == nil {
		return
	}
	for _, h := range m.hiers {
		if h.err != nil {
			continue
		}
		names, err := staleCandidates(h.parent)
		if err != nil {
			m.note("cgroup %s: look for stale groups in %s: %v", m.mode, h.parent, err)
			continue
		}
		for _, name := range names {
			if err := m.sweepOne(h, p, name); err != nil {
				m.note("cgroup %s: remove stale group %s: %v", m.mode, name, err)
			}
		}
	}
}

func (m *Manager) sweepOne(h, p *hierarchy, name string) error {
	g := &Group{mode: m.mode, name: name, lockFD: -1, pathFD: -1}
	if h == p {
		fd, err := lockDir(filepath.Join(p.parent, name), false)
		if errors.Is(err, unix.EWOULDBLOCK) || errors.Is(err, unix.ENOENT) {
			return nil // live, or removed by someone else meanwhile
		}
		if err != nil {
			return err
		}
		g.lockFD = fd
		// The whole group, in every hierarchy, is ours to remove now.
		for _, o := range m.hiers {
			if o.err == nil {
				g.adopt(o, filepath.Join(o.parent, name))
			}
		}
	} else {
		// The primary pass ran first, so a group still present there is live.
		// One missing there is a leftover of a crash during Create or Delete.
		if exists(filepath.Join(p.parent, name)) {
			return nil
		}
		g.adopt(h, filepath.Join(h.parent, name))
	}
	procs, _ := g.procsLeft()
	if err := g.Delete(); err != nil {
		return err
	}
	if len(procs) > 0 {
		m.note("cgroup %s: removed stale group %s left by a crashed stockade, killing its %d processes", m.mode, name, len(procs))
	} else {
		m.note("cgroup %s: removed stale group %s left by a crashed stockade", m.mode, name)
	}
	return nil
}

// adopt adds an existing directory of a stale group in hierarchy h.
func (g *Group) adopt(h *hierarchy, dir string) {
	if !exists(dir) {
		return
	}
	g.dirs = append(g.dirs, dir)
	for _, c := range h.controllers {
		g.setDir(c, dir)
	}
}

func staleCandidates(dir string) ([]string, error) {
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
