package main

import (
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unicode"
	"unicode/utf8"

	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/profiles"
)

// hints are what stockade adds on stderr after a run that failed the way a
// first try fails, where the payload's own message does not say that the
// jail is the reason. Each rule reads only the run's spec and result and
// the caller's working directory (cwd; "" when unknown), and says nothing
// unless it is sure: a hint that is wrong is worse than none.
func hints(spec jail.Spec, res *jail.Result, cwd string) []string {
	var out []string
	for _, rule := range []func(jail.Spec, *jail.Result, string) string{missingScriptHint, relativeFileHint, missingModuleHint} {
		if h := rule(spec, res, cwd); h != "" {
			out = append(out, h)
		}
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

// notFound is CPython's last traceback line for an open() of a path that
// is not there, naming the path as the program gave it.
var notFound = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?m)^FileNotFoundError: \[Errno 2\] No such file or directory: '([^'\n]+)'$`)
})

// relativeFileHint: a script that opens data/x.csv relative to its working
// directory, run from the directory holding data/. The jail's cwd is its
// fresh /work, so the file is not there; on the host, it is.
func relativeFileHint(spec jail.Spec, res *jail.Result, cwd string) string {
	if cwd == "" || spec.Workdir != "" || res.Verdict != jail.VerdictExit {
		return ""
	}
	m := notFound().FindStringSubmatch(res.Stderr)
	if m == nil {
		return ""
	}
	// As for the missing script: a path the payload wrote that leaves the
	// directory, or carries control characters, is not answered.
	rel := filepath.Clean(m[1])
	if !filepath.IsLocal(rel) || !printable(rel) {
		return ""
	}
	if _, err := os.Stat(filepath.Join(cwd, rel)); err != nil {
		return ""
	}
	// Bind the top directory of the path (data/ of data/x.csv) where the
	// jail can open it, or the file itself when it is not in one; below
	// /mnt when its name is taken in the root (etc/, tmp/, usr/), which a
	// bind there would hide or be refused.
	top, _, _ := strings.Cut(rel, "/")
	src := filepath.Join(cwd, top)
	if strings.Contains(src, ":") {
		return "" // --ro SRC:DST cannot say it
	}
	dest := "/" + top
	if _, err := os.Lstat(dest); err == nil {
		dest = "/mnt/" + top
	}
	h := fmt.Sprintf("%s is in your current directory, not in the jail (its cwd is /work, which starts empty): bind it with --ro %s:%s and open %s",
		rel, shellQuote(src), dest, path.Join(dest, strings.TrimPrefix(rel, top)))
	// --workdir as root refuses a directory root owns (the jail would
	// write as root): no alternative that only meets another refusal.
	if fi, err := os.Stat(cwd); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && (os.Getuid() != 0 || (st.Uid >= uidMin() && st.Uid != 65534)) {
			h += fmt.Sprintf(", or run with --workdir %s (the directory as /work, writable; the jail's changes are copied back)", shellQuote(cwd))
		}
	}
	return h
}

// noModule is CPython's last traceback line for an import of a top-level
// module it cannot find. A dotted name (a package's missing submodule) is
// left alone: the package is there, so the root is not the reason.
var noModule = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?m)^ModuleNotFoundError: No module named '([A-Za-z_][A-Za-z0-9_]{0,63})'$`)
})

// missingModuleHint: `import polars` where polars is in the user's venv or
// pyenv, not in the jail's root. The default jail runs the host's
// /usr/bin/python3 with what Debian installed; nothing else says so.
func missingModuleHint(spec jail.Spec, res *jail.Result, cwd string) string {
	if res.Verdict != jail.VerdictExit {
		return ""
	}
	m := noModule().FindStringSubmatch(res.Stderr)
	if m == nil {
		return ""
	}
	mod := m[1]
	// The user's own module beside the script (helper.py, or a package
	// directory) is in the caller's directory, not in any root.
	if cwd != "" && spec.Workdir == "" && !strings.Contains(cwd, ":") {
		for _, name := range []string{mod + ".py", mod} {
			if _, err := os.Stat(filepath.Join(cwd, name)); err == nil {
				return fmt.Sprintf("%s is in your current directory, not in the jail: bind the directory with --ro %s:/src and add --env PYTHONPATH=/src",
					name, shellQuote(cwd))
			}
		}
	}
	// The message is the payload's to write: a name the caller's own
	// code does not spell would have stockade recommend installing a
	// package the payload chose (a typo-squat, 'reqeusts'). Say what the
	// jail's Python is, and name no package.
	if !callerNames(spec, mod) {
		return "the program imports a module the jail's Python lacks, by a name its code (the command line, or the script run) does not spell out, so no package is named here: " +
			"the jail's Python is the host's /usr/bin/python3 with the packages Debian installed, or the --rootfs's (see docs/jail.md, The data stack)"
	}
	// Debian names a module's package python3-NAME, lower case, '_' as '-'.
	deb := "python3-" + strings.ReplaceAll(strings.ToLower(mod), "_", "-")
	if spec.Rootfs != "" && spec.Rootfs != jail.RootfsHost {
		return fmt.Sprintf("no module %s in the jail's root %s: build the root with it (stockade rootfs build --packages %s or --pip %s DIR; see docs/profiles.md, Root filesystems)",
			mod, shellQuote(spec.Rootfs), deb, mod)
	}
	return fmt.Sprintf("no module %s in the jail: its Python is the host's /usr/bin/python3 with the packages Debian installed (a venv's, pyenv's or pip --user's are not there); "+
		"add it on the host with apt-get install %s (where Debian packages it), or build a root with it and run with --rootfs DIR "+
		"(stockade rootfs build --pip %s DIR; see docs/jail.md, The data stack, and docs/profiles.md, Root filesystems)", mod, deb, mod)
}

// maxScriptRead bounds how much of a script callerNames reads: a hint is
// not worth reading a large file for.
const maxScriptRead = 1 << 20

// callerNames reports whether mod is a whole word (not part of a longer
// identifier) of the caller's own words: the command's arguments, or the
// script one of them names as a file bound read-only (stockade python
// FILE), read on the host. Not a file in --workdir: the payload could
// have swapped it for a symlink or FIFO, making the hint an oracle.
func callerNames(spec jail.Spec, mod string) bool {
	word := regexp.MustCompile(`(^|[^A-Za-z0-9_])` + regexp.QuoteMeta(mod) + `([^A-Za-z0-9_]|$)`)
	for i, arg := range spec.Args {
		if i > 0 && word.MatchString(arg) {
			return true
		}
	}
	read := func(p string) bool {
		// O_NONBLOCK: an open of a FIFO would wait for a writer.
		f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			return false
		}
		defer f.Close()
		if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
			return false // a FIFO or device would block or never end
		}
		b := make([]byte, maxScriptRead)
		n, _ := io.ReadFull(f, b)
		return word.Match(b[:n])
	}
	for _, arg := range spec.Args[min(1, len(spec.Args)):] {
		for _, b := range spec.ReadOnly {
			if b.Dest == arg && read(b.Source) {
				return true
			}
		}
	}
	return false
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

// roIntoWorkHint answers an --ro refused for a destination in /work (as
// --ro $PWD/data:/work/data, to keep a script's relative paths working):
// stockade mounts /work itself, so the bind goes elsewhere, or the
// directory becomes /work.
func roIntoWorkHint(ros []string) string {
	for _, r := range ros {
		b, err := profiles.ParseBind(r)
		if err != nil || (b.Dest != "/work" && !strings.HasPrefix(b.Dest, "/work/")) {
			continue
		}
		return fmt.Sprintf("--ro %s: bind it outside /work instead (as --ro %s:/data, and open /data/...), "+
			"or make a directory the jail's /work with --workdir DIR (writable; the jail's changes are copied back)", r, shellQuote(b.Source))
	}
	return ""
}

// workdirOwnerHint answers the jail's refusal of a --workdir owned by root
// or a system account with the command that fixes it: the jail writes
// there as the directory's owner, which must be an ordinary user (a uid
// of login.defs' UID_MIN or above, and not nobody, as package jail checks).
func workdirOwnerHint(spec jail.Spec, err error) string {
	if spec.Workdir == "" || !strings.Contains(err.Error(), "--workdir "+spec.Workdir+" is owned by ") {
		return ""
	}
	min := uidMin()
	uid := min
	// Under sudo, the user who typed the command is the natural owner.
	if v, perr := strconv.ParseUint(os.Getenv("SUDO_UID"), 10, 32); perr == nil && v >= uint64(min) && v != 65534 {
		uid = uint32(v)
	}
	return fmt.Sprintf("the jail writes as the directory's owner, which must be an ordinary user (a uid of %d or above, not nobody): "+
		"chown -R %d:%d %s (a user of yours, or any unused uid)", min, uid, uid, shellQuote(spec.Workdir))
}

// uidMin is the first uid of an ordinary user, login.defs' UID_MIN (1000
// unless it says otherwise), the bound the jail holds a --workdir's owner to.
func uidMin() uint32 {
	b, err := os.ReadFile("/etc/login.defs")
	if err != nil {
		return 1000
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "UID_MIN" {
			if v, err := strconv.ParseUint(f[1], 10, 32); err == nil && v > 0 {
				return uint32(v)
			}
		}
	}
	return 1000
}
