package main

import (
	"fmt"
	"io"
	"os"

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
