package main

import (
	"fmt"
	"io"
	"os"
	"os/user"
	"strconv"
	"strings"

	"github.com/stockade/stockade/cgroup"
	"github.com/stockade/stockade/internal/hostenv"
	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/vmtier"
	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"
)

// doctorCommand says what this host supports, and proves it by running the
// default jail once: exit 0 only if that works with every isolation the
// default profile asks for. It takes the cgroup flags run takes, so that
// it checks the configuration the user will run (a delegated cgroup given
// with --cgroup-parent, or --no-cgroup), not stockade's own cgroup.
func doctorCommand(stdout io.Writer) *cli.Command {
	return &cli.Command{
		Name:  "doctor",
		Usage: "show what this host supports and try the default jail",
		Description: "Checks the configuration you will run: give it the --cgroup-parent or --no-cgroup\n" +
			"you give run. Exit status: 0 the default jail ran, 1 it did not (the output says why), 125 a bad flag.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "cgroup-parent", Usage: "check the jail with its cgroup below this path, as run --cgroup-parent will (default: $STOCKADE_CGROUP_PARENT)"},
			&cli.BoolFlag{Name: "no-cgroup", Usage: "check the jail without a cgroup, as run --no-cgroup will"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return &exitError{code: jail.ExitJailError, msg: fmt.Sprintf("doctor: unexpected argument %q", c.Args().First())}
			}
			host := hostOf(c)
			if host.NoCgroup && c.String("cgroup-parent") != "" {
				return &exitError{code: jail.ExitJailError, msg: "doctor: --cgroup-parent and --no-cgroup: give one of them"}
			}
			for _, l := range hostFacts(host) {
				fmt.Fprintln(stdout, l)
			}
			for _, l := range cgroupParentFacts(c, host) {
				fmt.Fprintln(stdout, l)
			}
			for _, l := range vmtier.Doctor(host) {
				fmt.Fprintln(stdout, l)
			}
			prof, err := loadProfile("")
			if err != nil {
				return &exitError{code: jail.ExitJailError, msg: err.Error()}
			}
			spec := prof.Spec([]string{"/bin/true"}, host)
			res, err := jail.Run(c.Context, spec, jail.Streams{})
			if err != nil {
				fmt.Fprintf(stdout, "default jail: FAILED: %v\n", err)
				return &exitError{code: 1}
			}
			fmt.Fprintf(stdout, "default jail: ok (cgroup %s, seccomp %s, %.1f ms)\n", res.Cgroup, res.Seccomp, res.WallMs)
			for _, d := range res.Degraded {
				fmt.Fprintf(stdout, "default jail: degraded: %s\n", d)
			}
			return nil
		},
	}
}

// hostFacts is what this host supports, one line a fact: what `stockade
// doctor` prints and `stockade serve` reports in /v1/health, for the runs
// of host (its cgroup parent, or none).
func hostFacts(host jail.Host) []string {
	var out []string
	p := func(format string, a ...any) { out = append(out, fmt.Sprintf(format, a...)) }
	var u unix.Utsname
	_ = unix.Uname(&u)
	p("kernel: %s %s", unix.ByteSliceToString(u.Release[:]), unix.ByteSliceToString(u.Machine[:]))
	p("running as: uid %d", os.Getuid())
	p("user namespaces: user.max_user_namespaces = %s", sysctl("user/max_user_namespaces"))
	if v := sysctl("kernel/unprivileged_userns_clone"); v != "" {
		p("user namespaces: kernel.unprivileged_userns_clone = %s", v)
	}
	if v := sysctl("kernel/apparmor_restrict_unprivileged_userns"); v != "" {
		p("user namespaces: kernel.apparmor_restrict_unprivileged_userns = %s%s", v,
			map[bool]string{true: " (unprivileged users need an AppArmor profile allowing userns)", false: ""}[v == "1"])
	}
	p("seccomp: %s", seccompSupport())
	if sh, err := hostenv.Detect(); err != nil {
		p("shape: unknown: %v", err)
	} else {
		out = append(out, sh.Describe()...)
	}
	if host.NoCgroup {
		p("cgroup: not used (--no-cgroup): no memory, CPU or pids limit; rlimits only")
		return out
	}
	cgOK := false
	if m, err := cgroup.NewManager(cgroup.Options{Parent: host.CgroupParent}); err != nil {
		p("cgroup: NOT usable: %v", err)
	} else {
		cgOK = m.Check(cgroup.Limits{MemoryMax: 1 << 30, CPUs: 1, PidsMax: 64}) == nil
		out = append(out, m.Describe()...)
		// Its lock on the cgroup released, so that restoreCgroup can
		// undo the leaf when doctor exits.
		if err := m.Close(); err != nil {
			p("cgroup: %v", err)
		}
	}
	if !cgOK && os.Getuid() != 0 {
		name := strconv.Itoa(os.Getuid())
		if u, err := user.Current(); err == nil {
			name = u.Username
		}
		out = append(out, cgroup.DelegationHelp(name, os.Getuid())...)
	}
	return out
}

// cgroupParentFacts says where the checked cgroup parent came from, and
// to a normal user how to stop typing it: run, python, doctor, selftest,
// serve and mcp take it from the environment.
func cgroupParentFacts(c *cli.Context, host jail.Host) []string {
	if host.NoCgroup {
		return nil
	}
	parent, from := cgroupParent(c)
	switch {
	case from == "$"+cgroupParentEnv:
		return []string{fmt.Sprintf("cgroup parent: %s (from $%s, which every command with --cgroup-parent takes)", parent, cgroupParentEnv)}
	case from != "" && os.Getuid() != 0:
		return []string{fmt.Sprintf("cgroup parent: %s (--cgroup-parent); to stop typing it: export %s=%s (in ~/.profile), and every command takes it",
			parent, cgroupParentEnv, shellQuote(parent))}
	case from == "" && os.Getuid() != 0:
		return []string{fmt.Sprintf("cgroup parent: none given; a delegated cgroup is given with --cgroup-parent or $%s (docs/cgroups.md)", cgroupParentEnv)}
	}
	return nil
}

func sysctl(name string) string {
	b, err := os.ReadFile("/proc/sys/" + name)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// seccompSupport reads the kernel's own word: the Seccomp field of
// /proc/self/status exists only on kernels built with seccomp.
func seccompSupport() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "unknown: " + err.Error()
	}
	if !strings.Contains(string(b), "\nSeccomp:") {
		return "NOT supported by this kernel"
	}
	if v := sysctl("kernel/seccomp/actions_avail"); v != "" {
		if !strings.Contains(v, "user_notif") {
			return "filters supported, but no user notification (" + v + "): blocked calls cannot be reported"
		}
		return "filters and user notification (" + v + ")"
	}
	return "supported"
}
