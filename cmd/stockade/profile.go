package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"sort"

	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/profiles"
	"github.com/urfave/cli/v2"
)

// loadProfile resolves --profile: a file path, a name in
// /etc/stockade/profiles or $XDG_CONFIG_HOME/stockade/profiles, or a
// built-in. The empty reference is the default, "python".
func loadProfile(ref string) (*profiles.Profile, error) {
	if ref == "" {
		ref = "python"
	}
	return profiles.Load(ref, profiles.DefaultSearchPath(os.Getenv))
}

// profileSpec turns a profile (already validated by Load) into the jail's
// plain data. Flags are applied on top of this, field by field.
func profileSpec(p *profiles.Profile) jail.Spec {
	l, fs := p.Limits, p.Filesystem
	s := jail.Spec{
		Timeout:     l.Timeout,
		OutputLimit: l.Output,
		Rootfs:      fs.Rootfs,
		TmpfsSize:   fs.TmpfsSize,
		ExecWorkdir: !fs.Noexec,
		Seccomp:     p.Seccomp.Policy,
		Rlimits:     jail.Rlimits{OpenFiles: uint64(l.OpenFiles), FileSize: uint64(l.FileSize)},
		Cgroup: jail.CgroupSpec{MemoryMax: l.Memory, SwapMax: l.Swap, CPUs: l.CPUs,
			PidsMax: l.Pids, CPUTime: l.CPUTime},
	}
	if l.FileSize == 0 {
		s.Rlimits.FileSize = math.MaxUint64 // the profile's "no limit"
	}
	switch fs.Workdir {
	case profiles.WorkdirFresh:
		s.WorkdirMode = jail.WorkdirFresh
	case profiles.WorkdirNone:
		s.WorkdirMode = jail.WorkdirNone
	default:
		s.Workdir = fs.Workdir
	}
	for _, b := range fs.RO {
		s.ReadOnly = append(s.ReadOnly, jail.Bind{Source: b.Source, Dest: b.Dest})
	}
	keys := make([]string, 0, len(p.Environment.Vars))
	for k := range p.Environment.Vars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		s.Env = append(s.Env, k+"="+p.Environment.Vars[k])
	}
	return s
}

func profileCommand(stdout, stderr io.Writer) *cli.Command {
	fail := func(err error) error { return &exitError{code: jail.ExitJailError, msg: err.Error()} }
	return &cli.Command{
		Name:  "profile",
		Usage: "list, show and check run profiles",
		Subcommands: []*cli.Command{
			{
				Name:  "list",
				Usage: "the built-in profiles and those in the search path",
				Action: func(c *cli.Context) error {
					for _, n := range profiles.BuiltinNames() {
						p, err := profiles.Builtin(n)
						if err != nil {
							return fail(err)
						}
						fmt.Fprintf(stdout, "%-14s built-in  %s\n", n, p.Description)
					}
					for _, dir := range profiles.DefaultSearchPath(os.Getenv) {
						ents, _ := os.ReadDir(dir)
						for _, e := range ents {
							fmt.Fprintf(stdout, "%-14s %s\n", e.Name(), dir)
						}
					}
					return nil
				},
			},
			{
				Name:      "show",
				Usage:     "print the fully merged profile as TOML",
				ArgsUsage: "NAME|FILE",
				Action: func(c *cli.Context) error {
					p, err := loadProfile(c.Args().First())
					if err != nil {
						return fail(err)
					}
					b, err := p.TOML()
					if err != nil {
						return fail(err)
					}
					_, err = stdout.Write(b)
					return err
				},
			},
			{
				Name:      "check",
				Usage:     "validate a profile file; exit 0 if it is good",
				ArgsUsage: "FILE",
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return fail(fmt.Errorf("profile check: give one FILE"))
					}
					p, err := loadProfile(c.Args().First())
					if err != nil {
						return fail(err)
					}
					fmt.Fprintf(stdout, "%s: ok\n", p.Name)
					return nil
				},
			},
		},
	}
}
