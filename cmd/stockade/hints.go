package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/stockade/stockade/jail"
)

// hints are what stockade adds on stderr after a run that failed the way a
// first try fails, where the payload's own message does not say that the
// jail is the reason. Each rule reads only the run's spec and result and
// the caller's working directory (cwd; "" when unknown), and says nothing
// unless it is sure: a hint that is wrong is worse than none.
func hints(spec jail.Spec, res *jail.Result, cwd string) []string {
	var out []string
	if h := missingScriptHint(spec, res, cwd); h != "" {
		out = append(out, h)
	}
	return out
}

// cantOpen is CPython's message for a script it cannot open, naming the
// path as it resolved it against the working directory (/work).
// Compiled on first use, not by every start of stockade (issue 20).
var cantOpen = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?m)^python[0-9.]*: can't open file '(/work/[^'\n]+)': \[Errno 2\]`)
})

// missingScriptHint: `stockade run -- python3 task.py` from the directory
// holding task.py. The jail's /work is fresh, so python3 exits 2 without
// the file; the user's file is right there, on the host.
func missingScriptHint(spec jail.Spec, res *jail.Result, cwd string) string {
	if cwd == "" || spec.Workdir != "" || res.Verdict != jail.VerdictExit || res.ExitCode != 2 {
		return ""
	}
	m := cantOpen().FindStringSubmatch(res.Stderr)
	if m == nil {
		return ""
	}
	// The message is the payload's to write: a path that leaves the
	// directory ("/work/x/../../etc/passwd" names a file that exists from
	// anywhere) or carries control characters (escape sequences, printed
	// here raw even with --json) is not one python3 was given.
	rel := strings.TrimPrefix(m[1], "/work/")
	if !filepath.IsLocal(rel) || !printable(rel) {
		return ""
	}
	fi, err := os.Stat(filepath.Join(cwd, rel))
	if err != nil || !fi.Mode().IsRegular() {
		return ""
	}
	return fmt.Sprintf("%s is in your current directory, not in the jail (its /work starts empty): run it with `stockade python %s`, "+
		"or bind the directory with --ro %s:/src (and run /src/%s), or --workdir %s (writable; the jail's changes are copied back)",
		rel, shellQuote(rel), shellQuote(cwd), rel, shellQuote(cwd))
}

// printable reports whether s is UTF-8 without control characters.
func printable(s string) bool {
	return utf8.ValidString(s) && strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) < 0
}

// shellQuote quotes s for a POSIX shell where it needs it: in single
// quotes, a single quote inside closing them, escaped, and opening them
// again.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%+=:,./-_") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
