package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

var (
	// A Markdown link or image: [text](target), the target without spaces.
	docLink = regexp.MustCompile(`\]\(([^()\s]+)\)`)
	// An inline code span, whose brackets are not links.
	docCodeSpan = regexp.MustCompile("`[^`]*`")
	docHeading  = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
)

// headingAnchor is the anchor GitHub gives a heading: lower case, letters,
// digits, '-' and '_' kept, other punctuation dropped, spaces made '-'.
func headingAnchor(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// docAnchors are the anchors of a Markdown file's headings outside fenced
// blocks; a repeated heading gets -1, -2, ... as on GitHub.
func docAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
			continue
		}
		m := docHeading.FindStringSubmatch(l)
		if fenced || m == nil {
			continue
		}
		a := headingAnchor(m[1])
		if n := seen[a]; n > 0 {
			anchors[a+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}

// docLinks are the relative link targets of a Markdown file, with their
// lines; links to other sites and links inside code are not checked.
func docLinks(text string) (targets []string, lines []int) {
	fenced := false
	for i, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
			continue
		}
		// Indented blocks are examples; a link there is shell text.
		if fenced || strings.HasPrefix(l, "    ") {
			continue
		}
		for _, m := range docLink.FindAllStringSubmatch(docCodeSpan.ReplaceAllString(l, ""), -1) {
			if strings.Contains(m[1], "://") || strings.HasPrefix(m[1], "mailto:") {
				continue
			}
			targets, lines = append(targets, m[1]), append(lines, i+1)
		}
	}
	return targets, lines
}

// docFiles are the files whose examples run: README.md, ARCHITECTURE.md and
// docs/*.md, relative to the repository root, in that order.
func docFiles(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"README.md", "ARCHITECTURE.md"}
	for _, d := range docs {
		files = append(files, "docs/"+filepath.Base(d))
	}
	if len(docs) < 10 {
		t.Fatalf("only %d files in docs/: has the documentation moved?", len(docs))
	}
	return files
}

func TestDocAnchors(t *testing.T) {
	a := docAnchors("# The data stack: numpy, pandas, matplotlib\n## stockade serve: a local server\n```\n# not a heading\n```\n## Network (`make bench`, 2026-12-03)\n## Usage\n## Usage\n")
	for _, want := range []string{"the-data-stack-numpy-pandas-matplotlib", "stockade-serve-a-local-server", "network-make-bench-2026-12-03", "usage", "usage-1"} {
		if !a[want] {
			t.Errorf("no anchor %q in %v", want, a)
		}
	}
	if a["not-a-heading"] {
		t.Errorf("a fenced line made an anchor: %v", a)
	}
	targets, _ := docLinks("see [x](a.md#b) and `[y](c.md)`, [z](https://example.org)\n    [w](d.md)\n")
	if len(targets) != 1 || targets[0] != "a.md#b" {
		t.Errorf("links: %q", targets)
	}
}

// TestDocLinksResolve: every relative link in README.md, ARCHITECTURE.md and
// docs/*.md leads to a file that exists, and a #fragment to one of that
// file's headings. The README was split into docs/ by topic; a section that
// moves again must not leave its links behind.
func TestDocLinksResolve(t *testing.T) {
	root := "../.."
	files := docFiles(t)
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		anchors[path] = docAnchors(string(text))
		return anchors[path]
	}
	checked := 0
	for _, f := range files {
		text, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		targets, lines := docLinks(string(text))
		for i, target := range targets {
			checked++
			path, frag, _ := strings.Cut(target, "#")
			dest := filepath.Join(root, f)
			if path != "" {
				dest = filepath.Join(root, filepath.Dir(f), path)
			}
			if _, err := os.Stat(dest); err != nil {
				t.Errorf("%s:%d: link %s: %v", f, lines[i], target, err)
				continue
			}
			if frag == "" {
				continue
			}
			if !strings.HasSuffix(dest, ".md") {
				t.Errorf("%s:%d: link %s: an anchor into a file that is not Markdown", f, lines[i], target)
				continue
			}
			if !anchorsOf(dest)[frag] {
				t.Errorf("%s:%d: link %s: %s has no heading #%s", f, lines[i], target, strings.TrimPrefix(dest, root+"/"), frag)
			}
		}
	}
	t.Logf("%d relative links checked in %d files", checked, len(files))
	if checked < 30 {
		t.Errorf("only %d links checked: has the link parser lost them?", checked)
	}
}

// TestDocHelpNamesExistingFiles: the files --help and stockade(1) send a
// reader to exist in the repository (make install copies them as they are).
func TestDocHelpNamesExistingFiles(t *testing.T) {
	named := regexp.MustCompile(`(docs/[a-z]+\.md|README\.md)`).FindAllString(docsHelp(), -1)
	if len(named) < 5 {
		t.Fatalf("--help names only %q", named)
	}
	for _, f := range named {
		if _, err := os.Stat(filepath.Join("../..", f)); err != nil {
			t.Errorf("--help names %s: %v", f, err)
		}
	}
}
