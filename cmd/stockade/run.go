package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/profiles"
	"github.com/stockade/stockade/pydata"
	"github.com/stockade/stockade/vmtier"
	"github.com/urfave/cli/v2"
)

// policyFlag is a flag that sets one profile field. Flags are one more
// profile layer, built with the profile's own setter, merged over --profile
// and validated with it: a bad value gets the same check and message from a
// flag as from a file. The flags that take one value come from the profile
// schema's rows (profiles.Flags), so a field with a flag in its row needs
// no line here.
type policyFlag struct {
	name  string
	field profiles.Field
	usage string
}

var policyFlags = schemaFlags()

func schemaFlags() []policyFlag {
	var fs []policyFlag
	for _, f := range profiles.Flags() {
		fs = append(fs, policyFlag{f.Name, f.Field, f.Usage})
	}
	return fs
}

// jailFlags are the flags of run and python. Only a flag that is given
// changes the profile; the defaults shown are the python profile's.
func jailFlags() []cli.Flag {
	def := profiles.Defaults()
	flags := []cli.Flag{
		&cli.StringFlag{Name: "profile", Usage: "run profile: a built-in (python, python-strict, shell), a name in /etc/stockade/profiles or $XDG_CONFIG_HOME/stockade/profiles, or a FILE", DefaultText: def.Name},
		&cli.BoolFlag{Name: "json", Usage: "print one JSON result object on stdout instead of streaming output"},
	}
	for _, f := range policyFlags {
		flags = append(flags, &cli.StringFlag{Name: f.name, Usage: f.usage, DefaultText: def.Text(f.field)})
	}
	return append(flags,
		&cli.StringSliceFlag{Name: "env", Usage: "add KEY=VALUE to the jail's environment (repeatable)"},
		&cli.StringFlag{Name: "workdir", Usage: "bind this host directory at /work instead of a fresh empty one"},
		&cli.BoolFlag{Name: "no-workdir", Usage: "/work is an empty read-only directory"},
		&cli.BoolFlag{Name: "exec-workdir", Usage: "allow executing files from /work (default: noexec)"},
		&cli.StringSliceFlag{Name: "ro", Usage: "bind SRC[:DST] read-only (repeatable)"},
		&cli.StringSliceFlag{Name: "allow-net", Usage: "let the jail reach these hosts through its proxy: NAME, *.SUFFIX, NAME:PORT (443 unless given; :80 for plain HTTP), IP or CIDR (comma-separated or repeated)"},
		&cli.StringSliceFlag{Name: "allow-private", Usage: "let allowed hosts resolve to this private or special-purpose CIDR (never loopback, link-local or cloud metadata)"},
		&cli.StringFlag{Name: "cgroup-parent", Usage: "create the run's cgroup below this path (default: $STOCKADE_CGROUP_PARENT, else stockade's own cgroup)"},
		&cli.BoolFlag{Name: "no-cgroup", Usage: "no cgroup: rlimits only, reported as degraded"},
		&cli.BoolFlag{Name: "vm-emulate", Usage: "with --isolation vm and no /dev/kvm: run the guest under software emulation (slow; for testing)"},
	)
}

// phasesFlag is run's and python's --phases: where start-up time goes
// (docs/performance.md), for whoever measures stockade, not for a run's
// caller, so hidden.
func phasesFlag() cli.Flag {
	return &cli.BoolFlag{Name: "phases", Hidden: true, Usage: "print when each step of the run began, on stderr"}
}

func runCommand(stdin *os.File, stdout, stderr io.Writer) *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "run a command in a fresh jail",
		ArgsUsage: "[flags] -- CMD [ARGS...]",
		Flags: append(jailFlags(), phasesFlag(),
			&cli.StringFlag{Name: "server", Usage: "run it through `stockade serve` listening on this unix socket, or a gateway at https://HOST:PORT"},
			&cli.StringFlag{Name: "token", EnvVars: []string{"STOCKADE_TOKEN"}, Usage: "with --server https://...: the bearer `TOKEN` the gateway asks for"},
			&cli.StringFlag{Name: "ca-file", Usage: "with --server https://...: the PEM `FILE` of the certificates that may sign the gateway's (default: the system's)"}),
		Action: func(c *cli.Context) error {
			if c.NArg() == 0 {
				return &exitError{code: jail.ExitJailError, msg: "run: no command given (stockade run [flags] -- CMD ARGS)"}
			}
			if c.IsSet("server") {
				return runRemote(c, c.Args().Slice(), stdin, stdout, stderr)
			}
			spec, err := specFromFlags(c, c.Args().Slice(), nil)
			if err != nil {
				return &exitError{code: jail.ExitJailError, msg: err.Error()}
			}
			return runJail(c, spec, stdin, stdout, stderr)
		},
	}
}

func pythonCommand(stdin *os.File, stdout, stderr io.Writer) *cli.Command {
	flags := append(jailFlags(), phasesFlag(), &cli.StringFlag{Name: "c", Usage: "the program, as a string"})
	return &cli.Command{
		Name:      "python",
		Usage:     "run Python code from -c CODE, a FILE, or - (stdin) in a fresh jail",
		ArgsUsage: "[flags] (-c CODE | FILE | -) [ARGS...]",
		Flags:     flags,
		Action: func(c *cli.Context) error {
			args := c.Args().Slice()
			var argv []string
			var code *profiles.Bind
			switch {
			case c.IsSet("c"):
				argv = append([]string{"python3", "-c", c.String("c")}, args...)
			case len(args) == 0:
				return &exitError{code: jail.ExitJailError, msg: "python: give -c CODE, a FILE, or - for stdin"}
			case args[0] == "-":
				// The code arrives on stdin, which the jail reads directly.
				argv = append([]string{"python3", "-"}, args[1:]...)
			default:
				// The file alone is bound read-only, so the jail sees the
				// program and not the directory around it.
				src, err := absPath(args[0])
				if err != nil {
					return &exitError{code: jail.ExitJailError, msg: err.Error()}
				}
				// Said here, as the script: the bind would refuse it
				// naming an --ro the user never typed.
				if _, err := os.Stat(src); errors.Is(err, fs.ErrNotExist) {
					return &exitError{code: jail.ExitJailError, msg: fmt.Sprintf("python: %s: no such script (give a FILE that exists, -c CODE, or - for stdin)", args[0])}
				}
				code = &profiles.Bind{Source: src, Dest: "/run/stockade/" + filepath.Base(src)}
				argv = append([]string{"python3", code.Dest}, args[1:]...)
			}
			spec, err := specFromFlags(c, argv, code)
			if err != nil {
				return &exitError{code: jail.ExitJailError, msg: err.Error()}
			}
			return runJail(c, spec, stdin, stdout, stderr)
		},
	}
}

// specFromFlags loads --profile, lays the flags over it as one more profile,
// validates the result once and turns it into the jail's Spec. code is the
// program file of `stockade python FILE`, bound read-only like an --ro.
func specFromFlags(c *cli.Context, argv []string, code *profiles.Bind) (jail.Spec, error) {
	p, err := loadProfile(c.String("profile"))
	if err != nil {
		return jail.Spec{}, err
	}
	layer, err := flagLayer(c)
	if err != nil {
		return jail.Spec{}, err
	}
	if code != nil {
		// Set directly, not parsed from SRC:DST: a file name may hold ':'.
		layer.Filesystem.RO = append(layer.Filesystem.RO, *code)
		layer.Mark(profiles.FieldRO, profiles.Origin{File: "python " + code.Source})
	}
	merged := profiles.Merge(p, layer)
	merged.Name = p.Name
	if err := merged.Validate(); err != nil {
		if h := roIntoWorkHint(c.StringSlice("ro")); h != "" {
			return jail.Spec{}, fmt.Errorf("%w\n%s", err, h)
		}
		return jail.Spec{}, err
	}
	return merged.Spec(argv, hostOf(c)), nil
}

// hostOf is this process's host: what its environment says
// (jail.DefaultHost: the upstream proxy, the state directories) and the
// command's own flags about the machine rather than the policy
// (--cgroup-parent, --no-cgroup, where a command has them).
func hostOf(c *cli.Context) jail.Host {
	h := jail.DefaultHost()
	// Every jail of a root with matplotlib gets that root's font cache.
	h.Providers = []jail.Provider{pydata.FontCache{}}
	h.NoCgroup = c.Bool("no-cgroup")
	h.CgroupParent, _ = cgroupParent(c)
	return h
}

// cgroupParentEnv names the variable a normal user sets once, where their
// delegated cgroup is, instead of typing --cgroup-parent on every command.
const cgroupParentEnv = "STOCKADE_CGROUP_PARENT"

// cgroupParent is the cgroup parent a command's runs go below, and where
// it came from: the --cgroup-parent flag, else $STOCKADE_CGROUP_PARENT
// (for a command that has the flag, and not with --no-cgroup), else ""
// (stockade's own cgroup).
func cgroupParent(c *cli.Context) (parent, from string) {
	if v := c.String("cgroup-parent"); v != "" {
		return v, "--cgroup-parent"
	}
	if c.Bool("no-cgroup") || c.Command == nil {
		return "", ""
	}
	for _, f := range c.Command.Flags {
		if slices.Contains(f.Names(), "cgroup-parent") {
			if v := os.Getenv(cgroupParentEnv); v != "" {
				return v, "$" + cgroupParentEnv
			}
			break
		}
	}
	return "", ""
}

// flagValue is one field set from the command line, origin naming the flag.
type flagValue struct {
	origin string
	field  profiles.Field
	value  string
}

// flagLayer is the profile the given flags make. Each value is set with the
// flag's name as its origin, so that every error names the flag.
func flagLayer(c *cli.Context) (*profiles.Profile, error) {
	// Which flags were given, asked once: the library's IsSet, for a flag
	// not given, runs every flag's names through a regexp, which cost every
	// run half a millisecond. None of these flags has an alias.
	given := map[string]bool{}
	for _, n := range c.LocalFlagNames() {
		given[n] = true
	}
	var vals []flagValue
	for _, f := range policyFlags {
		if given[f.name] {
			vals = append(vals, flagValue{"--" + f.name, f.field, c.String(f.name)})
		}
	}
	switch {
	case given["workdir"] && given["no-workdir"]:
		return nil, fmt.Errorf("--workdir and --no-workdir: give one of them")
	case given["workdir"]:
		vals = append(vals, flagValue{"--workdir", profiles.FieldWorkdir, c.String("workdir")})
	case c.Bool("no-workdir"):
		vals = append(vals, flagValue{"--no-workdir", profiles.FieldWorkdir, profiles.WorkdirNone})
	}
	if given["vm-emulate"] {
		vals = append(vals, flagValue{"--vm-emulate", profiles.FieldVMEmulate, strconv.FormatBool(c.Bool("vm-emulate"))})
	}
	if given["exec-workdir"] {
		vals = append(vals, flagValue{"--exec-workdir", profiles.FieldNoexec, strconv.FormatBool(!c.Bool("exec-workdir"))})
	}
	for _, r := range c.StringSlice("ro") {
		vals = append(vals, flagValue{"--ro", profiles.FieldRO, r})
	}
	for _, e := range c.StringSlice("allow-net") {
		vals = append(vals, flagValue{"--allow-net", profiles.FieldNetworkAllow, e})
	}
	for _, e := range c.StringSlice("allow-private") {
		vals = append(vals, flagValue{"--allow-private", profiles.FieldNetworkAllowPrivate, e})
	}
	for _, e := range c.StringSlice("env") {
		vals = append(vals, flagValue{"--env", profiles.FieldEnvVars, e})
	}
	layer := &profiles.Profile{Name: "flags"}
	for _, v := range vals {
		if err := layer.Set(v.field, v.value, profiles.Origin{File: v.origin}); err != nil {
			return nil, err
		}
	}
	return layer, nil
}

func runJail(c *cli.Context, spec jail.Spec, stdin *os.File, stdout, stderr io.Writer) error {
	asJSON := c.Bool("json")
	var before []jail.Phase // the command line's own steps before the run's
	if c.Bool("phases") {
		spec.Host.TracePhases = true
		before = append(mainPhases(), jail.PhaseAt("main: run the jail", jail.MonotonicNow()))
	}
	streams := jail.Streams{Stdin: stdin, Notices: stderr}
	if !asJSON {
		streams.Stdout, streams.Stderr = stdout, stderr
	}
	// A reader that went away (stockade ... | head) must not kill stockade
	// mid-run: that would leave its run directory and cgroup behind.
	signal.Ignore(syscall.SIGPIPE)
	// SIGINT, SIGTERM and SIGHUP cancel the run: the jail is killed and
	// everything of it removed before stockade exits, and the result says
	// which signal did it. Later ones are caught too, so cleanup is never
	// cut short; only SIGKILL can do that (the next run sweeps up).
	ctx, cancel := context.WithCancelCause(c.Context)
	defer cancel(nil)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	go func() {
		select {
		case s := <-sigs:
			if sig, ok := s.(syscall.Signal); ok {
				cancel(jail.CancelSignal{Signal: sig})
			} else {
				cancel(nil)
			}
		case <-ctx.Done():
		}
	}()
	var res *jail.Result
	var err error
	if spec.Isolation == jail.IsolationVM {
		res, err = vmtier.Run(ctx, spec, streams, vmtier.Options{Notices: stderr})
	} else {
		res, err = jail.Run(ctx, spec, streams)
	}
	res.StockadeVersion = version
	if spec.Host.TracePhases {
		res.Phases = append(append(before, res.Phases...), jail.PhaseAt("main: report", jail.MonotonicNow()))
		defer func() { printPhases(stderr, res.Phases, jail.MonotonicNow()) }()
	}
	// The hints go to stderr with --json too, as every notice of
	// stockade's does: stdout stays the one JSON object.
	var tips []string
	if err == nil {
		cwd, _ := syscall.Getwd()
		tips = hints(spec, res, cwd)
	}
	if asJSON {
		if encErr := res.WriteJSON(stdout); encErr != nil {
			return &exitError{code: jail.ExitJailError, msg: "write result: " + encErr.Error()}
		}
		printError(stderr, strings.Join(tips, "\n"))
		return &exitError{code: res.ExitCode}
	}
	if err != nil {
		msg := err.Error()
		if h := workdirOwnerHint(spec, err); h != "" {
			msg += "\n" + h
		}
		return &exitError{code: res.ExitCode, msg: msg}
	}
	for _, line := range append(explain(res), tips...) {
		fmt.Fprintln(stderr, "stockade:", line)
	}
	return &exitError{code: res.ExitCode}
}

// explain says, on stderr, why a run ended when it was not simply the
// command's own exit: the caller should never have to guess.
func explain(r *jail.Result) []string {
	var out []string
	l := r.Limits
	switch r.Verdict {
	case jail.VerdictTimeout:
		out = append(out, fmt.Sprintf("timeout: killed after %v", time.Duration(l.TimeoutMs)*time.Millisecond))
	case jail.VerdictCPU:
		out = append(out, fmt.Sprintf("cpu: killed after %v of CPU time", time.Duration(deref(l.CPUTimeMs))*time.Millisecond))
	case jail.VerdictMemory:
		out = append(out, fmt.Sprintf("memory: the kernel killed a process at the %s limit (peak %d MiB)", profiles.FormatSize(deref(l.MemoryBytes)), r.PeakMemoryBytes>>20))
	case jail.VerdictSeccomp:
		out = append(out, "seccomp: killed for a system call of a foreign ABI (i386 or x32)")
	case jail.VerdictPids:
		out = append(out, fmt.Sprintf("pids: a fork or thread failed at the limit of %d tasks", deref(l.Pids)))
	case jail.VerdictDisk:
		out = append(out, fmt.Sprintf("disk: /work filled its %s (%d files at most; peak %d MiB in %d files)",
			profiles.FormatSize(deref(l.WorkBytes)), jail.WorkInodes(deref(l.WorkBytes)), r.WorkPeakBytes>>20, r.WorkPeakInodes))
	case jail.VerdictSignal:
		out = append(out, fmt.Sprintf("killed by signal %d (%v)", *r.Signal, syscall.Signal(*r.Signal)))
	case jail.VerdictCancelled:
		if r.Error != nil {
			out = append(out, *r.Error)
		}
	}
	if r.StdoutTruncated {
		out = append(out, fmt.Sprintf("stdout cut at %d bytes (%d dropped)", len(r.Stdout), r.StdoutBytes-int64(len(r.Stdout))))
	}
	if r.StderrTruncated {
		out = append(out, fmt.Sprintf("stderr cut at %d bytes (%d dropped)", len(r.Stderr), r.StderrBytes-int64(len(r.Stderr))))
	}
	for _, b := range r.BlockedSyscalls {
		out = append(out, fmt.Sprintf("blocked %s x%d", b.Example, b.Count))
	}
	for _, d := range r.Degraded {
		out = append(out, "degraded: "+d)
	}
	if cb := r.CopyBack; cb != nil {
		// What of the jail's changes DIR did not get, and why.
		for _, c := range cb.Conflicts {
			out = append(out, "copy-back conflict: "+c)
		}
		for _, s := range cb.Skipped {
			out = append(out, "copy-back: "+s)
		}
	}
	return out
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// absPath makes p absolute against the real working directory (getcwd), not
// $PWD, which may name it through a symlink that the bind then refuses.
func absPath(p string) (string, error) {
	if filepath.IsAbs(p) {
		return filepath.Clean(p), nil
	}
	wd, err := syscall.Getwd()
	if err != nil {
		return "", err
	}
	return filepath.Join(wd, p), nil
}
