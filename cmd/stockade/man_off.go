//go:build !stockade_genman || urfave_cli_no_docs

package main

import (
	"io"

	"github.com/urfave/cli/v2"
)

// manCommand exists only in the build-time man page generator (build tag
// stockade_genman, without urfave_cli_no_docs): the shipped binary leaves
// out the CLI library's document generator, whose init costs every run.
func manCommand(io.Writer) *cli.Command { return nil }
