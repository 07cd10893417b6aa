package main

import (
	"io"
	"os"

	"github.com/stockade/stockade/jail"
	"github.com/urfave/cli/v2"
)

// selftestCommand is filled in by the selftest work (issue 6).
func selftestCommand(stdin *os.File, stdout, stderr io.Writer) *cli.Command {
	return &cli.Command{
		Name:  "selftest",
		Usage: "attack the jail with the built-in escape suite under a profile",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "profile", Usage: "profile to test (NAME or FILE)", DefaultText: "python"},
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON"},
		},
		Action: func(c *cli.Context) error {
			return &exitError{code: jail.ExitJailError, msg: "selftest: not built yet"}
		},
	}
}
