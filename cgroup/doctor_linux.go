package cgroup

import (
	"fmt"
	"strings"
)

// Describe says, one line each, what `stockade doctor` should show: the
// mode, where groups go per controller, which controllers are usable and,
// for those that are not, why; then what NewManager changed or noticed.
func (m *Manager) Describe() []string {
	var lines []string
	switch m.variant {
	case "hybrid":
		if m.mode == V1 {
			lines = append(lines, "cgroup: v1 (hybrid host: cgroup2 is mounted, but the memory, cpu and pids controllers are in v1 hierarchies)")
		} else {
			lines = append(lines, "cgroup: v2 (controllers on cgroup2, beside named v1 hierarchies)")
		}
	case "legacy":
		lines = append(lines, "cgroup: v1 (legacy host: no cgroup2)")
	default:
		lines = append(lines, "cgroup: v2 (unified hierarchy)")
	}
	controllers := v2Controllers
	if m.mode == V1 {
		controllers = v1Controllers
	}
	for _, c := range controllers {
		lines = append(lines, m.describeController(c))
	}
	if m.ctlErr["memory"] == nil {
		switch {
		case m.swap:
			lines = append(lines, fmt.Sprintf("cgroup swap: limited per group (%s)", m.swapFile()))
		case m.hostSwap:
			lines = append(lines, fmt.Sprintf("cgroup swap: NOT limited: swap is active but the kernel does not account it per cgroup (no %s)", m.swapFile()))
		default:
			lines = append(lines, fmt.Sprintf("cgroup swap: no %s, but the host has no active swap, so none can be used", m.swapFile()))
		}
	}
	if m.mode == V1 {
		if m.usable("freezer") {
			lines = append(lines, "cgroup kill: freeze, SIGKILL every task, thaw, repeat (v1 freezer)")
		} else {
			lines = append(lines, "cgroup kill: SIGKILL every task until empty (no v1 freezer: a fast fork loop can race the kill)")
		}
	} else {
		lines = append(lines, "cgroup kill: cgroup.kill (Linux 5.14+; otherwise cgroup.freeze and SIGKILL)")
	}
	for _, n := range m.notes {
		lines = append(lines, "cgroup note: "+n)
	}
	return lines
}

func (m *Manager) describeController(c string) string {
	for _, h := range m.hiers {
		if !h.has(c) {
			continue
		}
		if err := m.ctlErr[c]; err != nil {
			return fmt.Sprintf("cgroup %s: NOT usable: %v", c, err)
		}
		shared := ""
		if len(h.controllers) > 1 {
			shared = " (hierarchy " + strings.Join(h.controllers, ",") + ")"
		}
		return fmt.Sprintf("cgroup %s: usable, groups under %s%s", c, h.parent, shared)
	}
	if err := m.ctlErr[c]; err != nil {
		return fmt.Sprintf("cgroup %s: NOT usable: %v", c, err)
	}
	return fmt.Sprintf("cgroup %s: NOT usable: not mounted", c)
}

func (m *Manager) usable(c string) bool {
	for _, h := range m.hiers {
		if h.has(c) && h.err == nil {
			return m.ctlErr[c] == nil
		}
	}
	return false
}
