package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/testenv"
)

// A README example is one shell command in an indented code block that
// invokes stockade, in README.md, ARCHITECTURE.md or docs/*.md. The founders'
// rule is that every one runs as written, so this test reads them out of
// those files and runs them with bin/stockade.
//
// What the documentation says about an example, the test reads:
//   - a trailing comment's "exit N" is the status expected (else 0), and its
//     "prints TEXT" the whole of stdout (trimmed);
//   - "<!-- synopsis -->" before a block: usage with placeholders, not
//     examples;
//   - "<!-- not run: REASON -->" before a block, or "(not run here: REASON)"
//     in a line's comment: an example this machine cannot run, counted and
//     logged with its reason.
//
// The examples share one directory holding what the documentation says
// they find there: task.py, data/sales.csv (city, sales) and out/ owned by
// an unprivileged user.
type readmeExample struct {
	file    string // the file it is in, relative to the repository
	line    int    // line of its first physical line in file
	cmd     string // the command, comment removed, continuation lines joined
	comment string
	block   int    // index of its code block, counted over every file
	skip    string // why it is not run; "" when it runs
	synop   bool
}

var (
	readmeMarker   = regexp.MustCompile(`^<!--\s*(synopsis|not run:\s*(.*?))\s*-->\s*$`)
	readmeInvokes  = regexp.MustCompile(`(^|[|;&]\s*|^([A-Za-z_][A-Za-z0-9_]*=\S*\s+)+|^systemd-run\s[^#]*?\s)stockade\s`)
	readmeExit     = regexp.MustCompile(`\bexit (\d+)\b`)
	readmePrints   = regexp.MustCompile(`\bprints (.+?)\s*(,|;|$)`)
	readmeNotHere  = regexp.MustCompile(`\(not run here: ([^)]*)\)`)
	readmeServeCmd = regexp.MustCompile(`^stockade serve\s`)
)

// shellScan reads s as the shell does and returns where its trailing
// "# ..." comment starts (-1 if none; a '#' counts only outside quotes and
// after white space) and the quote s ends inside (0 if none).
func shellScan(s string) (comment int, open byte) {
	var q byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case q != 0:
			if c == q {
				q = 0
			} else if c == '\\' && q == '"' {
				i++
			}
		case c == '\'' || c == '"':
			q = c
		case c == '\\':
			i++
		case c == '#' && (i == 0 || s[i-1] == ' ' || s[i-1] == '\t'):
			return i, 0
		}
	}
	return -1, q
}

// splitComment returns the command and its trailing "# ..." comment.
func splitComment(s string) (string, string) {
	if i, _ := shellScan(s); i >= 0 {
		return strings.TrimSpace(s[:i]), strings.TrimSpace(s[i+1:])
	}
	return strings.TrimSpace(s), ""
}

// openQuote says whether s ends inside a quoted string (a command that goes
// on on the next line).
func openQuote(s string) bool {
	_, q := shellScan(s)
	return q != 0
}

// allExamples reads every documentation file's examples, numbering their
// blocks across files so that a server's block never spans two.
func allExamples(t *testing.T) []readmeExample {
	t.Helper()
	var out []readmeExample
	blocks := 0
	for _, f := range docFiles(t) {
		text, err := os.ReadFile(filepath.Join("../..", f))
		if err != nil {
			t.Fatal(err)
		}
		ex := readmeExamples(string(text))
		for i := range ex {
			ex[i].file = f
			ex[i].block += blocks
		}
		if len(ex) > 0 {
			blocks = ex[len(ex)-1].block
		}
		out = append(out, ex...)
	}
	return out
}

// readmeExamples parses one Markdown file's indented code blocks (fenced
// blocks are data: JSON, TOML, YAML) into commands.
func readmeExamples(text string) []readmeExample {
	lines := strings.Split(text, "\n")
	var out []readmeExample
	fenced, inBlock := false, false
	block := 0
	marker := ""
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		if m := readmeMarker.FindStringSubmatch(strings.TrimSpace(l)); m != nil {
			marker, inBlock = m[1], false
			continue
		}
		indented := strings.HasPrefix(l, "    ")
		if !indented {
			if strings.TrimSpace(l) != "" {
				// A marker speaks of the block right after it, nothing later.
				marker, inBlock = "", false
			}
			continue
		}
		if !inBlock {
			// An indented block starts after a blank line (or a marker).
			if i == 0 || (strings.TrimSpace(lines[i-1]) != "" && !readmeMarker.MatchString(strings.TrimSpace(lines[i-1]))) {
				continue
			}
			inBlock = true
			block++
		}
		start := i
		phys := strings.TrimSpace(l)
		full := phys
		for (strings.HasSuffix(phys, "\\") || openQuote(full)) && i+1 < len(lines) {
			i++
			phys = strings.TrimSpace(lines[i])
			if strings.HasSuffix(full, "\\") {
				full = strings.TrimSuffix(full, "\\") + " " + phys
			} else {
				full += "\n" + lines[i][min(len(lines[i]), 4):]
			}
		}
		cmd, comment := splitComment(full)
		if !readmeInvokes.MatchString(cmd) && !strings.Contains(cmd, "curl ") {
			continue
		}
		ex := readmeExample{line: start + 1, cmd: cmd, comment: comment, block: block}
		switch {
		case marker == "synopsis":
			ex.synop = true
		case strings.HasPrefix(marker, "not run:"):
			ex.skip = strings.TrimSpace(strings.TrimPrefix(marker, "not run:"))
		}
		if m := readmeNotHere.FindStringSubmatch(comment); m != nil {
			ex.skip = m[1]
		}
		out = append(out, ex)
	}
	return out
}

func TestReadmeExamplesParse(t *testing.T) {
	ex := readmeExamples("text\n\n    stockade run -- true   # prints x, exit 3\n    curl y\n\n<!-- not run: net -->\n\n    stockade run --allow-net a -- sh -c '\n    echo #1'\n\n<!-- synopsis -->\n\n    stockade run [flags]\n\n```\nstockade run\n```\n    make x\n")
	if len(ex) != 4 {
		t.Fatalf("want 4 commands, got %+v", ex)
	}
	if ex[0].cmd != "stockade run -- true" || ex[0].comment != "prints x, exit 3" || ex[0].skip != "" {
		t.Errorf("first: %+v", ex[0])
	}
	if ex[2].skip != "net" || ex[2].cmd != "stockade run --allow-net a -- sh -c '\necho #1'" || ex[2].line != 8 {
		t.Errorf("third: %+v", ex[2])
	}
	if !ex[3].synop {
		t.Errorf("fourth: %+v", ex[3])
	}
}

// TestReadmeExamplesRun runs every example of README.md, ARCHITECTURE.md
// and docs/*.md this machine can run.
func TestReadmeExamplesRun(t *testing.T) {
	testenv.NeedJail(t)
	bin := testenv.NeedBinary(t, "with the embedded init")
	bin, err := filepath.Abs(bin)
	if err != nil {
		t.Fatal(err)
	}
	examples := allExamples(t)

	pathDir := t.TempDir()
	if err := os.Symlink(bin, filepath.Join(pathDir, "stockade")); err != nil {
		t.Fatal(err)
	}
	dir := reachable(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "task.py"), []byte("print(sum(range(100)))\n"), 0o644))
	must(os.Mkdir(filepath.Join(dir, "data"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "data", "sales.csv"), []byte("city,sales\nOslo,10\nLima,7\nOslo,5\n"), 0o644))
	must(os.Mkdir(filepath.Join(dir, "out"), 0o755))
	must(os.Chown(filepath.Join(dir, "out"), 4242, 4242))
	// The server's socket is moved into the test's directory: two runs of
	// this test, or a real server on the host, must not meet at
	// /run/stockade/stockade.sock.
	sock := filepath.Join(dir, "stockade.sock")
	env := append(os.Environ(), "PATH="+pathDir+":"+os.Getenv("PATH"))

	var server *exec.Cmd
	serverBlock := 0
	stopServer := func() {
		if server == nil {
			return
		}
		terminate(server, 15*time.Second)
		server = nil
	}
	defer stopServer()

	ran, synopses := 0, 0
	var skipped []string
	for _, ex := range examples {
		if ex.block != serverBlock {
			stopServer()
		}
		switch {
		case ex.synop:
			synopses++
			continue
		case ex.skip != "":
			skipped = append(skipped, ex.file+":"+strconv.Itoa(ex.line)+": "+ex.skip)
			continue
		}
		isClient := !readmeInvokes.MatchString(ex.cmd)
		if isClient && ex.block != serverBlock {
			continue // a curl outside a server's block is not an example of ours
		}
		cmd := strings.ReplaceAll(ex.cmd, "/run/stockade/stockade.sock", sock)
		if readmeServeCmd.MatchString(cmd) {
			// A server runs until stopped: start it, wait for its socket,
			// run the block's clients, stop it at the block's end.
			server = exec.Command("bash", "-c", "exec "+cmd)
			server.Dir, server.Env = dir, env
			var serr bytes.Buffer
			server.Stdout, server.Stderr = &serr, &serr
			must(server.Start())
			serverBlock = ex.block
			deadline := time.Now().Add(20 * time.Second)
			for {
				if fi, err := os.Stat(sock); err == nil && fi.Mode()&os.ModeSocket != 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s:%d: %s: no socket after 20s: %s", ex.file, ex.line, ex.cmd, serr.String())
				}
				time.Sleep(100 * time.Millisecond)
			}
			ran++
			continue
		}
		ran++
		want := 0
		if m := readmeExit.FindStringSubmatch(ex.comment); m != nil {
			want, _ = strconv.Atoi(m[1])
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		c := exec.CommandContext(ctx, "bash", "-c", cmd)
		c.Dir, c.Env = dir, env
		var stdout, stderr bytes.Buffer
		c.Stdout, c.Stderr = &stdout, &stderr
		err := c.Run()
		cancel()
		got := 0
		if err != nil {
			ee, ok := err.(*exec.ExitError)
			if !ok {
				t.Errorf("%s:%d: %s: %v", ex.file, ex.line, ex.cmd, err)
				continue
			}
			got = ee.ExitCode()
		}
		if got != want {
			t.Errorf("%s:%d: %s\nexit %d, the file says %d\nstdout: %.500s\nstderr: %.500s", ex.file, ex.line, ex.cmd, got, want, stdout.String(), stderr.String())
			continue
		}
		if m := readmePrints.FindStringSubmatch(ex.comment); m != nil {
			if strings.TrimSpace(stdout.String()) != m[1] {
				t.Errorf("%s:%d: %s\nprints %q, the file says %q\nstderr: %.500s", ex.file, ex.line, ex.cmd, stdout.String(), m[1], stderr.String())
			}
		}
	}
	stopServer()
	// What the examples left behind that the documentation says they make.
	if _, err := os.Stat(filepath.Join(dir, "out", "chart.png")); err != nil {
		t.Errorf("the data stack example made no out/chart.png: %v", err)
	}
	t.Logf("README.md, ARCHITECTURE.md, docs/*.md: %d examples, %d run, %d not run here, %d synopsis lines", ran+len(skipped), ran, len(skipped), synopses)
	for _, s := range skipped {
		t.Logf("not run: %s", s)
	}
	if ran < 18 {
		t.Errorf("only %d documentation examples ran: has the parser lost them?", ran)
	}
}
