package cgroup

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// DelegationHelp says, as commands to copy, how the user name (uid) gets a
// cgroup stockade can create groups in without being root: on v2 a
// delegated systemd scope (systemd-run) under user@.service, which
// delegates controllers to the user's manager; on v1 directories the admin
// makes and chowns once in each hierarchy, named by --cgroup-parent.
func DelegationHelp(name string, uid int) []string {
	l, err := detectHost()
	if err != nil {
		return []string{"cgroup delegation: " + err.Error()}
	}
	return delegationHelp(l, name, uid)
}

func delegationHelp(l layout, name string, uid int) []string {
	if l.mode == V2 {
		mgr := fmt.Sprintf("/sys/fs/cgroup/user.slice/user-%d.slice/user@%d.service", uid, uid)
		return []string{
			"cgroup: a normal user needs a delegated cgroup; with systemd (user@.service running for you):",
			"  systemd-run --user --scope -p Delegate=yes stockade run ...",
			"  (check it the same way: systemd-run --user --scope -p Delegate=yes stockade doctor)",
			fmt.Sprintf("  (the scope gets the controllers user@.service delegates; if %s/cgroup.controllers lacks memory, pids or cpu, as root:", mgr),
			`   mkdir -p /etc/systemd/system/user@.service.d && printf '[Service]\nDelegate=memory pids cpu\n' >/etc/systemd/system/user@.service.d/delegate.conf && systemctl daemon-reload`,
			"   then log in again)",
			"  or, for a system service, run it with Delegate=memory pids cpu in its unit (examples/systemd/)",
		}
	}
	var dirs []string
	for _, c := range v1Controllers {
		m, ok := l.v1[c]
		if !ok {
			continue
		}
		d := filepath.Join(m.mountPoint, "stockade-"+name)
		if !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	if len(dirs) == 0 {
		return []string{"cgroup: no v1 controller hierarchy is mounted to delegate"}
	}
	return []string{
		"cgroup: a normal user needs a delegated cgroup; on cgroup v1, as root, once:",
		fmt.Sprintf("  for d in %s; do mkdir -p $d && chown %s: $d $d/cgroup.procs $d/tasks; done", strings.Join(dirs, " "), name),
		fmt.Sprintf("  then: stockade run --cgroup-parent stockade-%s ...", name),
		fmt.Sprintf("  and check it: stockade doctor --cgroup-parent stockade-%s", name),
	}
}
