package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/stockade/stockade/jail"
)

// run runs the CLI in-process without a terminal and returns exit status,
// stdout and stderr.
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := realMain(context.Background(), append([]string{"stockade"}, args...), os.Stdin, &out, &errb)
	return code, out.String(), errb.String()
}

// A mistyped command or flag is one line on stderr: what was wrong and the
// nearest valid name, exit 125, nothing on stdout. It was 42 lines of help
// on stdout for a flag, and "No help topic for 'pyhton'" for a command.
func TestMistypedCommandOrFlagIsOneLineWithTheNearestName(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"pyhton", "-c", "print(1)"}, `stockade: unknown command "pyhton"; did you mean "python"?`},
		{[]string{"rnu", "--", "true"}, `stockade: unknown command "rnu"; did you mean "run"?`},
		{[]string{"help", "rnu"}, `stockade: unknown command "rnu"; did you mean "run"?`},
		{[]string{"profile", "shwo", "python"}, `stockade: profile: unknown command "shwo"; did you mean "show"?`},
		{[]string{"run", "--memroy", "1G", "--", "true"}, `stockade: run: unknown flag --memroy; did you mean --memory?`},
		{[]string{"python", "--alow-net", "pypi.org", "-c", "1"}, `stockade: python: unknown flag --alow-net; did you mean --allow-net?`},
		{[]string{"doctor", "--cgroup-parnet", "x"}, `stockade: doctor: unknown flag --cgroup-parnet; did you mean --cgroup-parent?`},
		{[]string{"--verison"}, `stockade: unknown flag --verison; did you mean --version?`},
		{[]string{"run", "--zzzzzzzzzz", "--", "true"}, `stockade: run: unknown flag --zzzzzzzzzz (stockade run --help lists the flags)`},
		{[]string{"xyzzyplugh"}, `stockade: unknown command "xyzzyplugh" (stockade --help lists the commands)`},
		{[]string{"run", "--timeout"}, `stockade: run: flag needs an argument: --timeout`},
		{[]string{"run", "--json=maybe", "--", "true"}, `stockade: run: invalid value "maybe" for flag --json (a flag that takes no value)`},
	} {
		code, out, errs := runCLI(t, c.args...)
		if code != jail.ExitJailError || out != "" || errs != c.want+"\n" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 125, nothing on stdout and %q", c.args, code, out, errs, c.want)
		}
	}
}

// Docker habits (issue 31): -m was answered "did you mean -h?", and
// --read-only and --network "unknown flag". Each is still a usage error
// (exit 125), answered with what stockade does instead.
func TestDockerHabitsAreAnsweredWithTheStockadeWay(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "-m", "64M", "--", "true"}, `stockade: run: unknown flag -m: the memory limit is --memory (as --memory 64M)`},
		{[]string{"run", "--read-only", "--", "true"}, `stockade: run: unknown flag --read-only: the jail's root is always read-only (/work and /tmp are its only writable places); drop the flag`},
		{[]string{"python", "--network", "none", "-c", "1"}, `stockade: python: unknown flag --network: no network is the default (as Docker's --network none); --allow-net HOST lets the jail reach named hosts`},
		{[]string{"run", "--pids-limit", "64", "--", "true"}, `stockade: run: unknown flag --pids-limit: the task limit is --pids`},
		{[]string{"run", "-v", "/data:/data", "--", "true"}, `stockade: run: unknown flag -v: bind a host directory with --ro SRC:DST (read-only) or --workdir DIR (as /work, writable)`},
		// Not a command that runs a jail: the nearest name, as before.
		{[]string{"doctor", "-m", "64M"}, `stockade: doctor: unknown flag -m; did you mean -h?`},
	} {
		code, out, errs := runCLI(t, c.args...)
		if code != jail.ExitJailError || out != "" || errs != c.want+"\n" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 125, nothing on stdout and %q", c.args, code, out, errs, c.want)
		}
	}
}

// Help is still there, on stdout, exit 0: with no command, for a command
// (stockade help run, stockade run --help), and for a command's commands.
func TestHelpStillShows(t *testing.T) {
	for _, args := range [][]string{{}, {"help"}, {"help", "run"}, {"run", "--help"}, {"profile"}, {"--help"}} {
		code, out, errs := runCLI(t, args...)
		if code != 0 || !strings.Contains(out, "USAGE:") || errs != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out, errs)
		}
	}
}
