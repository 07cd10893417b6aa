// Command stockade runs untrusted code, typically model-written Python, in a
// fresh Linux jail and says exactly why the run ended.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/vmtier"
	"github.com/urfave/cli/v2"
)

// version is set by the Makefile with -ldflags "-X main.version=...".
var version = "dev"

// docDir is where `make install` puts README.md, ARCHITECTURE.md and docs/
// (-X main.docDir=$(PREFIX)/share/doc/stockade); --help and stockade(1)
// point there.
var docDir = "/usr/local/share/doc/stockade"

// docsHelp says where the documentation of each topic is installed.
func docsHelp() string {
	return "Documentation, installed in " + docDir + ": README.md (start here), docs/cli.md (flags, exit status), docs/result.md (the JSON result), docs/profiles.md (profiles, root filesystems), docs/server.md (stockade serve), docs/deploying.md (systemd, rootless, containers), docs/security.md (the security model and known limits)."
}

func main() {
	startedMain = jail.MonotonicNow()
	// The VM tier's guest: stockade is its init (PID 1 of the guest
	// kernel, from the initramfs), and never returns.
	if len(os.Args) == 2 && os.Args[1] == vmtier.GuestArg && os.Getpid() == 1 {
		vmtier.GuestMain()
	}
	// A jail's init never gets here: without the embedded init, jail.Run
	// starts this binary again as init, and package jail's init takes
	// that process over before main.
	//
	// Before any command runs: run, python, serve (every request's jail),
	// selftest, doctor and rootfs all start processes.
	if err := keepInheritedToOurselves(); err != nil {
		printError(os.Stderr, err.Error())
		os.Exit(jail.ExitJailError)
	}
	parsing = jail.MonotonicNow()
	code := realMain(context.Background(), os.Args, os.Stdin, os.Stdout, os.Stderr)
	restoreCgroup(os.Stderr)
	os.Exit(code)
}

// exitError carries the process exit status out of a command's action.
type exitError struct {
	code int
	msg  string // printed as "stockade: msg" unless empty
}

func (e *exitError) Error() string { return e.msg }

// realMain runs the command line args; a run in progress ends when ctx
// does (as when stockade gets SIGTERM), so that a test calling it in
// process can stop a jail that outlives its timeout.
func realMain(ctx context.Context, args []string, stdin *os.File, stdout, stderr io.Writer) int {
	app := newApp(stdin, stdout, stderr)
	err := app.RunContext(ctx, args)
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		printError(stderr, ee.msg)
		return ee.code
	}
	// Errors from the CLI library that oneLineUsage does not see: the
	// jail was never set up, which is what 125 says.
	printError(stderr, err.Error())
	return jail.ExitJailError
}

// printError prefixes every line of msg, so that a profile's several
// errors each read as stockade's.
func printError(w io.Writer, msg string) {
	if msg == "" {
		return
	}
	for _, line := range strings.Split(strings.TrimRight(msg, "\n"), "\n") {
		fmt.Fprintln(w, "stockade:", line)
	}
}

func newApp(stdin *os.File, stdout, stderr io.Writer) *cli.App {
	app := &cli.App{
		Name:            "stockade",
		Usage:           "run untrusted code in a fresh Linux jail",
		Description:     docsHelp(),
		Version:         version,
		Writer:          stdout,
		ErrWriter:       stderr,
		HideHelpCommand: true,
		ExitErrHandler:  func(*cli.Context, error) {},
		// --env A=1,2 is one variable and --ro /data/a,b one path: the
		// library would split repeatable flags at commas otherwise.
		DisableSliceFlagSeparator: true,
		Commands: []*cli.Command{
			runCommand(stdin, stdout, stderr),
			pythonCommand(stdin, stdout, stderr),
			profileCommand(stdout, stderr),
			selftestCommand(stdin, stdout, stderr),
			doctorCommand(stdout),
			rootfsCommand(stdout, stderr),
			serveCommand(stderr),
			gatewayCommand(stderr),
			mcpCommand(stdin, stdout, stderr),
			completionCommand(stdout),
		},
	}
	if m := manCommand(stdout); m != nil {
		app.Commands = append(app.Commands, m)
	}
	oneLineUsage(app)
	return app
}
