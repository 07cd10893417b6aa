//go:build !linux

package main

import (
	"io"
	"os"

	"github.com/stockade/stockade/jail"
	"github.com/urfave/cli/v2"
)

// Off Linux there is no jail: the commands that need one say so.
func linuxOnly(name, usage string) *cli.Command {
	return &cli.Command{
		Name:  name,
		Usage: usage,
		Action: func(*cli.Context) error {
			return &exitError{code: jail.ExitJailError, msg: name + ": stockade runs jails on Linux only"}
		},
	}
}

func doctorCommand(io.Writer) *cli.Command {
	return linuxOnly("doctor", "show what this host supports and try the default jail")
}

func rootfsCommand(io.Writer, io.Writer) *cli.Command {
	return linuxOnly("rootfs", "build, import and check prepared root directories")
}

func selftestCommand(*os.File, io.Writer, io.Writer) *cli.Command {
	return linuxOnly("selftest", "attack the jail with the built-in escape suite under a profile")
}

func serveCommand(io.Writer) *cli.Command {
	return linuxOnly("serve", "serve runs over HTTP/1.1 + JSON on a unix socket, from a pool of prepared jails")
}

func gatewayCommand(io.Writer) *cli.Command {
	return linuxOnly("gateway", "serve the /v1 API over HTTPS to tenants, in front of a cluster of stockade serve --cluster nodes")
}

func mcpCommand(*os.File, io.Writer, io.Writer) *cli.Command {
	return linuxOnly("mcp", "serve the Model Context Protocol on stdio: run_python and sessions, in jails")
}

func runRemote(*cli.Context, []string, *os.File, io.Writer, io.Writer) error {
	return &exitError{code: jail.ExitJailError, msg: "run --server: stockade runs jails on Linux only"}
}

func restoreCgroup(io.Writer) {}

func keepInheritedToOurselves() error { return nil }
