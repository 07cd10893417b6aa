package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/profiles"
	"github.com/urfave/cli/v2"
)

// jailFlags override the profile field by field: only a flag that is given
// changes the spec; the defaults shown are the default profile's.
func jailFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "profile", Usage: "run profile: a built-in (python, python-strict, shell), a name in /etc/stockade/profiles or $XDG_CONFIG_HOME/stockade/profiles, or a FILE", DefaultText: "python"},
		&cli.BoolFlag{Name: "json", Usage: "print one JSON result object on stdout instead of streaming output"},
		&cli.StringFlag{Name: "timeout", Usage: "wall-clock limit (e.g. 500ms, 2s, 1m)", DefaultText: "10s"},
		&cli.StringSliceFlag{Name: "env", Usage: "add KEY=VALUE to the jail's environment (repeatable)"},
		&cli.StringFlag{Name: "rootfs", Usage: `root filesystem: "host" (derived from the host) or a prepared directory`, DefaultText: "host"},
		&cli.StringFlag{Name: "tmpfs-size", Usage: "size of /tmp (and /dev/shm)", DefaultText: "64M"},
		&cli.StringFlag{Name: "workdir", Usage: "bind this host directory at /work instead of a fresh empty one"},
		&cli.BoolFlag{Name: "no-workdir", Usage: "/work is an empty read-only directory"},
		&cli.BoolFlag{Name: "exec-workdir", Usage: "allow executing files from /work (default: noexec)"},
		&cli.StringSliceFlag{Name: "ro", Usage: "bind SRC[:DST] read-only (repeatable)"},
		&cli.StringFlag{Name: "output-limit", Usage: "bytes kept per output stream; the rest is dropped", DefaultText: "1M"},
		&cli.StringFlag{Name: "open-files", Usage: "RLIMIT_NOFILE", DefaultText: "256"},
		&cli.StringFlag{Name: "file-size", Usage: "largest file the jail may write (RLIMIT_FSIZE)", DefaultText: "64M"},
		&cli.StringFlag{Name: "seccomp", Usage: `system call policy (python, strict), or "off"`, DefaultText: "python"},
		&cli.StringFlag{Name: "memory", Usage: "memory limit of the whole jail (cgroup)", DefaultText: "512M"},
		&cli.StringFlag{Name: "swap", Usage: "swap allowed on top of --memory", DefaultText: "0"},
		&cli.Float64Flag{Name: "cpus", Usage: "CPU bandwidth in cores (cgroup quota)", DefaultText: "1"},
		&cli.Int64Flag{Name: "pids", Usage: "most tasks (processes and threads) at once", DefaultText: "128"},
		&cli.StringFlag{Name: "cpu-time", Usage: "CPU time of the whole tree (0: none)", DefaultText: "0"},
		&cli.StringFlag{Name: "cgroup-parent", Usage: "create the run's cgroup below this path (default: stockade's own cgroup)"},
		&cli.BoolFlag{Name: "no-cgroup", Usage: "no cgroup: rlimits only, reported as degraded"},
	}
}

func runCommand(stdin *os.File, stdout, stderr io.Writer) *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "run a command in a fresh jail",
		ArgsUsage: "[flags] -- CMD [ARGS...]",
		Flags:     jailFlags(),
		Action: func(c *cli.Context) error {
			if c.NArg() == 0 {
				return &exitError{code: jail.ExitJailError, msg: "run: no command given (stockade run [flags] -- CMD ARGS)"}
			}
			spec, err := specFromFlags(c, c.Args().Slice())
			if err != nil {
				return &exitError{code: jail.ExitJailError, msg: err.Error()}
			}
			return runJail(c, spec, stdin, stdout, stderr)
		},
	}
}

func pythonCommand(stdin *os.File, stdout, stderr io.Writer) *cli.Command {
	flags := append(jailFlags(), &cli.StringFlag{Name: "c", Usage: "the program, as a string"})
	return &cli.Command{
		Name:      "python",
		Usage:     "run Python code from -c CODE, a FILE, or - (stdin) in a fresh jail",
		ArgsUsage: "[flags] (-c CODE | FILE | -) [ARGS...]",
		Flags:     flags,
		Action: func(c *cli.Context) error {
			args := c.Args().Slice()
			var argv []string
			var code *jail.Bind
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
				code = &jail.Bind{Source: src, Dest: "/run/stockade/" + filepath.Base(src)}
				argv = append([]string{"python3", code.Dest}, args[1:]...)
			}
			spec, err := specFromFlags(c, argv)
			if err != nil {
				return &exitError{code: jail.ExitJailError, msg: err.Error()}
			}
			if code != nil {
				spec.ReadOnly = append(spec.ReadOnly, *code)
			}
			return runJail(c, spec, stdin, stdout, stderr)
		},
	}
}

func specFromFlags(c *cli.Context, argv []string) (jail.Spec, error) {
	p, err := loadProfile(c.String("profile"))
	if err != nil {
		return jail.Spec{}, err
	}
	s := profileSpec(p)
	s.Args = argv
	if err := applyFlags(c, &s); err != nil {
		return s, err
	}
	full := s.WithDefaults()
	return s, full.Validate()
}

// applyFlags puts every flag the user gave over the profile's value.
func applyFlags(c *cli.Context, s *jail.Spec) error {
	size := func(name string, dst *int64) error {
		if !c.IsSet(name) {
			return nil
		}
		v, err := profiles.ParseSize(c.String(name))
		if err != nil {
			return fmt.Errorf("--%s: %w", name, err)
		}
		*dst = v
		return nil
	}
	duration := func(name string, dst *time.Duration) error {
		if !c.IsSet(name) {
			return nil
		}
		v, err := profiles.ParseDuration(c.String(name))
		if err != nil {
			return fmt.Errorf("--%s: %w", name, err)
		}
		*dst = v
		return nil
	}
	var openFiles, fileSize int64 = int64(s.Rlimits.OpenFiles), int64(s.Rlimits.FileSize)
	for _, err := range []error{
		duration("timeout", &s.Timeout),
		duration("cpu-time", &s.Cgroup.CPUTime),
		size("tmpfs-size", &s.TmpfsSize),
		size("output-limit", &s.OutputLimit),
		size("open-files", &openFiles),
		size("file-size", &fileSize),
		size("memory", &s.Cgroup.MemoryMax),
		size("swap", &s.Cgroup.SwapMax),
	} {
		if err != nil {
			return err
		}
	}
	s.Rlimits.OpenFiles, s.Rlimits.FileSize = uint64(openFiles), uint64(fileSize)
	if c.IsSet("file-size") && fileSize == 0 {
		s.Rlimits.FileSize = math.MaxUint64 // as in a profile: 0 is no limit
	}
	s.Env = append(s.Env, c.StringSlice("env")...)
	if c.IsSet("rootfs") {
		s.Rootfs = c.String("rootfs")
	}
	if c.IsSet("workdir") {
		s.Workdir, s.WorkdirMode = c.String("workdir"), ""
	}
	if c.Bool("no-workdir") {
		s.Workdir, s.WorkdirMode = "", jail.WorkdirNone
	}
	if c.IsSet("exec-workdir") {
		s.ExecWorkdir = c.Bool("exec-workdir")
	}
	for _, r := range c.StringSlice("ro") {
		b, err := jail.ParseBind(r)
		if err != nil {
			return err
		}
		s.ReadOnly = append(s.ReadOnly, b)
	}
	if c.IsSet("seccomp") {
		s.Seccomp = c.String("seccomp")
	}
	if c.IsSet("cpus") {
		s.Cgroup.CPUs = c.Float64("cpus")
	}
	if c.IsSet("pids") {
		s.Cgroup.PidsMax = c.Int64("pids")
	}
	s.Cgroup.Parent = c.String("cgroup-parent")
	s.Cgroup.Disabled = c.Bool("no-cgroup")
	return nil
}

func runJail(c *cli.Context, spec jail.Spec, stdin *os.File, stdout, stderr io.Writer) error {
	asJSON := c.Bool("json")
	streams := jail.Streams{Stdin: stdin, Notices: stderr}
	if !asJSON {
		streams.Stdout, streams.Stderr = stdout, stderr
	}
	// A reader that went away (stockade ... | head) must not kill stockade
	// mid-run: that would leave its run directory and cgroup behind.
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	res, err := jail.Run(ctx, spec, streams)
	res.StockadeVersion = version
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetEscapeHTML(false)
		if encErr := enc.Encode(res); encErr != nil {
			return &exitError{code: jail.ExitJailError, msg: "write result: " + encErr.Error()}
		}
		return &exitError{code: res.ExitCode}
	}
	if err != nil {
		return &exitError{code: res.ExitCode, msg: err.Error()}
	}
	for _, line := range explain(spec, res) {
		fmt.Fprintln(stderr, "stockade:", line)
	}
	return &exitError{code: res.ExitCode}
}

// explain says, on stderr, why a run ended when it was not simply the
// command's own exit: the caller should never have to guess.
func explain(spec jail.Spec, r *jail.Result) []string {
	var out []string
	full := spec.WithDefaults()
	switch r.Verdict {
	case jail.VerdictTimeout:
		out = append(out, fmt.Sprintf("timeout: killed after %v", full.Timeout))
	case jail.VerdictCPU:
		out = append(out, fmt.Sprintf("cpu: killed after %v of CPU time", full.Cgroup.CPUTime))
	case jail.VerdictMemory:
		out = append(out, fmt.Sprintf("memory: the kernel killed a process at the %d MiB limit (peak %d MiB)", full.Cgroup.MemoryMax>>20, r.PeakMemoryBytes>>20))
	case jail.VerdictSeccomp:
		out = append(out, "seccomp: killed for a system call of a foreign ABI (i386 or x32)")
	case jail.VerdictPids:
		out = append(out, fmt.Sprintf("pids: a fork or thread failed at the limit of %d tasks", full.Cgroup.PidsMax))
	case jail.VerdictSignal:
		out = append(out, fmt.Sprintf("killed by signal %d (%v)", *r.Signal, syscall.Signal(*r.Signal)))
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
	return out
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
