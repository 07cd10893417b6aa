package main

import (
	"fmt"
	"strings"

	"github.com/stockade/stockade/jail"
	"github.com/urfave/cli/v2"
)

// oneLineUsage makes every usage error of app one line on stderr, exit 125:
// what was wrong and, when one is close, the nearest valid name. The CLI
// library printed the whole help (42 lines, on stdout) for a mistyped flag,
// and "No help topic for 'pyhton'" for a mistyped command.
func oneLineUsage(app *cli.App) {
	app.OnUsageError = usageError("")
	app.Action = commandOrHelp("", app.Commands, cli.ShowAppHelp)
	var walk func(path string, cmds []*cli.Command)
	walk = func(path string, cmds []*cli.Command) {
		for _, c := range cmds {
			p := strings.TrimSpace(path + " " + c.Name)
			c.OnUsageError = usageError(p)
			if len(c.Subcommands) > 0 && c.Action == nil {
				c.Action = commandOrHelp(p, c.Subcommands, cli.ShowSubcommandHelp)
			}
			walk(p, c.Subcommands)
		}
	}
	walk("", app.Commands)
}

// commandOrHelp is the action of a command that only holds others (the
// app itself, profile, rootfs): without an argument it shows the help, as
// the library does; with one, that argument named no command.
func commandOrHelp(path string, cmds []*cli.Command, help func(*cli.Context) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		if !c.Args().Present() {
			return help(c)
		}
		typed := c.Args().First()
		if path == "" && typed == "help" {
			// `stockade help [COMMAND]`: what the library's hidden help
			// command did before this action took its place.
			if c.Args().Len() == 1 {
				return help(c)
			}
			typed = c.Args().Get(1)
			if c.App.Command(typed) != nil {
				return cli.ShowCommandHelp(c, typed)
			}
		}
		var names []string
		for _, sub := range cmds {
			if !sub.Hidden {
				names = append(names, sub.Names()...)
			}
		}
		msg := fmt.Sprintf("unknown command %q", typed)
		if near := nearest(typed, names); near != "" {
			msg += fmt.Sprintf("; did you mean %q?", near)
		} else {
			msg += fmt.Sprintf(" (%s --help lists the commands)", strings.TrimSpace("stockade "+path))
		}
		return &exitError{code: jail.ExitJailError, msg: prefixed(path, msg)}
	}
}

// usageError turns the flag parser's error for the command at path into
// one line with the flag written as the user writes it (--name, not the
// parser's -name).
func usageError(path string) cli.OnUsageErrorFunc {
	return func(c *cli.Context, err error, _ bool) error {
		msg := err.Error()
		switch {
		case strings.HasPrefix(msg, "flag provided but not defined: -"):
			typed := strings.TrimPrefix(msg, "flag provided but not defined: -")
			var names []string
			if c.Command != nil {
				for _, f := range c.Command.VisibleFlags() {
					names = append(names, f.Names()...)
				}
			}
			msg = "unknown flag " + dashed(typed)
			if habit, ok := dockerHabits[strings.TrimLeft(typed, "-")]; ok && (path == "run" || path == "python") {
				msg += ": " + habit
			} else if near := nearest(strings.TrimLeft(typed, "-"), names); near != "" {
				msg += "; did you mean " + dashed(near) + "?"
			} else {
				msg += fmt.Sprintf(" (%s --help lists the flags)", strings.TrimSpace("stockade "+path))
			}
		case strings.HasPrefix(msg, "flag needs an argument: -"):
			msg = "flag needs an argument: " + dashed(strings.TrimPrefix(msg, "flag needs an argument: -"))
		case strings.HasPrefix(msg, "invalid boolean value "):
			// invalid boolean value "maybe" for -json: parse error
			val, name, ok := strings.Cut(strings.TrimPrefix(msg, "invalid boolean value "), " for -")
			name, _, _ = strings.Cut(name, ":")
			if ok {
				msg = fmt.Sprintf("invalid value %s for flag %s (a flag that takes no value)", val, dashed(name))
			}
		}
		return &exitError{code: jail.ExitJailError, msg: prefixed(path, msg)}
	}
}

// dockerHabits answer the flags a Docker user types by habit with what
// stockade does instead: most are its defaults, and a near name (-m is one
// edit from -h) would send the user to the wrong flag.
var dockerHabits = map[string]string{
	"m":            "the memory limit is --memory (as --memory 64M)",
	"read-only":    "the jail's root is always read-only (/work and /tmp are its only writable places); drop the flag",
	"network":      "no network is the default (as Docker's --network none); --allow-net HOST lets the jail reach named hosts",
	"net":          "no network is the default (as Docker's --network none); --allow-net HOST lets the jail reach named hosts",
	"pids-limit":   "the task limit is --pids",
	"memory-swap":  "swap on top of --memory is --swap (none unless given)",
	"cap-drop":     "the jail has no capabilities; drop the flag",
	"security-opt": "no-new-privileges and a seccomp allowlist are always on (--seccomp chooses the policy); drop the flag",
	"v":            "bind a host directory with --ro SRC:DST (read-only) or --workdir DIR (as /work, writable)",
	"volume":       "bind a host directory with --ro SRC:DST (read-only) or --workdir DIR (as /work, writable)",
	"e":            "set a variable with --env KEY=VALUE",
	"rm":           "every run's jail is removed when it ends; drop the flag",
	"w":            "the jail's working directory is /work: --workdir DIR binds DIR there",
}

func prefixed(path, msg string) string {
	if path == "" {
		return msg
	}
	return path + ": " + msg
}

// dashed writes a flag name as typed on the command line: -c, --memory.
func dashed(name string) string {
	name = strings.TrimLeft(name, "-")
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// nearest is the name in names closest to typed, if it is close enough to
// be a slip of the fingers (at most one edit in three letters, a swap of
// two neighbours counting as one), else "".
func nearest(typed string, names []string) string {
	best, bestD := "", max(1, len(typed)/3)+1
	for _, n := range names {
		if d := editDistance(typed, n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance: insertions,
// deletions, substitutions and swaps of adjacent letters, each costing one.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
