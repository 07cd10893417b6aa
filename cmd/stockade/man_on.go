//go:build stockade_genman && !urfave_cli_no_docs

package main

import (
	"io"

	"github.com/urfave/cli/v2"
)

// manCommand prints stockade(1) in roff, from the same command and flag
// tables as --help. Built only into the generator `make build` runs
// (go run -tags stockade_genman ./cmd/stockade __man).
func manCommand(stdout io.Writer) *cli.Command {
	return &cli.Command{
		Name:   "__man",
		Hidden: true,
		Action: func(c *cli.Context) error {
			c.App.Description = "stockade runs CMD in fresh user, mount, pid, network, ipc, uts and cgroup namespaces, in a read-only root with a small tmpfs, under cgroup memory, CPU and pids limits and a seccomp allowlist, and says exactly why the run ended. Exit status: the command's own; 128+N killed by signal N; 124 timeout or CPU-time limit; 125 the jail could not be set up (one line says why and the fix); 126 not executable; 127 not found. " + docsHelp()
			m, err := c.App.ToManWithSection(1)
			if err != nil {
				return err
			}
			_, err = io.WriteString(stdout, m)
			return err
		},
	}
}
