package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/profiles"
	"github.com/stockade/stockade/selftest"
	"github.com/stockade/stockade/vmtier"
	"github.com/urfave/cli/v2"
)

// selftestCommand runs the escape suite under a profile: every attack in its
// own jail, a table of what held, exit 0 only if every door did.
func selftestCommand(stdin *os.File, stdout, stderr io.Writer) *cli.Command {
	return &cli.Command{
		Name:  "selftest",
		Usage: "attack the jail with the built-in escape suite under a profile",
		Description: "Each attack is a small Python program run in its own jail under the profile: network, files,\n" +
			"descriptors the caller left open, identity, kernel surface (the never-allowed system calls, raw),\n" +
			"resources, concurrent runs (a sibling's sweep must spare a live run) and the terminal.\n" +
			"Exit status: 0 every door held, 1 a door is open, 125 the profile is bad or no jail could start.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "profile", Usage: "profile to test (NAME or FILE)", DefaultText: "python"},
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON"},
			&cli.StringFlag{Name: "cgroup-parent", Usage: "create each attack's cgroup below this path (a delegated cgroup when not root; default: $STOCKADE_CGROUP_PARENT)"},
			&cli.BoolFlag{Name: "no-cgroup", Usage: "no cgroup: rlimits only (the resource attacks then show what that leaves)"},
			&cli.StringSliceFlag{Name: "door", Usage: "attack only this door (" + strings.Join(selftest.Doors(), ", ") + "); repeatable"},
			&cli.StringFlag{Name: "isolation", Usage: `"vm": attack the jail inside a guest of the VM tier, all attacks in one guest (docs/isolation.md); default: the profile's`},
			&cli.BoolFlag{Name: "vm-emulate", Usage: "with --isolation vm and no /dev/kvm: run the guest under software emulation (slow; for testing)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return &exitError{code: jail.ExitJailError, msg: fmt.Sprintf("selftest: unexpected argument %q", c.Args().First())}
			}
			p, err := selftestProfile(c)
			if err != nil {
				return &exitError{code: jail.ExitJailError, msg: "selftest: " + err.Error()}
			}
			opts := selftest.Options{Doors: c.StringSlice("door")}
			for _, d := range opts.Doors {
				if !slices.Contains(selftest.Doors(), d) {
					return &exitError{code: jail.ExitJailError, msg: fmt.Sprintf("selftest: --door %q: no such door (%s)", d, strings.Join(selftest.Doors(), ", "))}
				}
			}
			if !c.Bool("json") {
				fmt.Fprintf(stderr, "stockade selftest: profile %s: %s\n", p.Name, p.Description)
				opts.Progress = stderr
			}
			var rep selftest.Report
			if p.Isolation == jail.IsolationVM {
				if !c.Bool("json") {
					fmt.Fprintln(stderr, "stockade selftest: isolation vm: every attack runs in one guest; its rows come when the guest answers")
				}
				rep, err = vmtier.Selftest(c.Context, p, hostOf(c), opts.Doors, vmtier.Options{Notices: stderr})
				if err != nil {
					return &exitError{code: jail.ExitJailError, msg: "selftest: " + err.Error()}
				}
			} else {
				rep = selftest.Run(c.Context, p, hostOf(c), opts)
			}
			if rep.NoJail {
				if c.Bool("json") {
					_ = rep.WriteJSON(stdout)
				}
				return &exitError{code: jail.ExitJailError, msg: "selftest: could not start a jail: " + rep.Error}
			}
			if c.Bool("json") {
				err = rep.WriteJSON(stdout)
			} else {
				err = rep.WriteTable(stdout)
			}
			if err != nil {
				return &exitError{code: 1, msg: "selftest: " + err.Error()}
			}
			if !rep.OK() {
				return &exitError{code: 1}
			}
			return nil
		},
	}
}

// selftestProfile is --profile with --isolation and --vm-emulate over it.
func selftestProfile(c *cli.Context) (*profiles.Profile, error) {
	p, err := loadProfile(c.String("profile"))
	if err != nil {
		return nil, err
	}
	layer := &profiles.Profile{Name: "flags"}
	if c.IsSet("isolation") {
		if err := layer.Set(profiles.FieldIsolation, c.String("isolation"), profiles.Origin{File: "--isolation"}); err != nil {
			return nil, err
		}
	}
	if c.IsSet("vm-emulate") {
		if err := layer.Set(profiles.FieldVMEmulate, strconv.FormatBool(c.Bool("vm-emulate")), profiles.Origin{File: "--vm-emulate"}); err != nil {
			return nil, err
		}
	}
	merged := profiles.Merge(p, layer)
	merged.Name = p.Name
	return merged, merged.Validate()
}
