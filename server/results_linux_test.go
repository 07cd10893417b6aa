package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/jail"
)

// What the model reads of a cell: these tests hold the text of an exec's
// and a run's answer to what the caller's code did, and nothing of the
// machinery that ran it.

// A cell that does not compile shows the cell's line and the error, as
// Python shows a script's, and no frame of the driver or of ast.parse
// (which the driver's parse of the cell used to leave on top).
func TestSyntaxErrorShowsTheCellOnly(t *testing.T) {
	s := startServer(t, "--pool", "1")
	id := s.session(api.SessionRequest{}).SessionID
	for _, c := range []struct{ code, want string }{
		{"x = 1\ny = (", `File "<cell 1>", line 2`},
		{"return 5", `File "<cell 2>", line 1`},
		{"print(1)\n1 +", `File "<cell 3>", line 2`},
	} {
		r := s.cell(id, c.code)
		if r.Verdict != api.ExecException || r.Error == nil || r.Error.Name != "SyntaxError" || r.Stdout != "" {
			t.Fatalf("%q: want a SyntaxError before any line ran: %+v", c.code, r)
		}
		tb := r.Error.Traceback
		if !strings.Contains(tb, c.want) || strings.Contains(tb, "Traceback (most recent call last)") ||
			strings.Contains(tb, "ast.py") || strings.Contains(tb, "driver") {
			t.Errorf("%q: the traceback is the cell's line and the error only:\n%s", c.code, tb)
		}
	}
	r := s.run(api.RunRequest{Code: code("x = 1\ny = (")})
	if r.ExitCode != 1 || !strings.Contains(r.Stderr, `File "<code>", line 2`) || !strings.Contains(r.Stderr, "SyntaxError") ||
		strings.Contains(r.Stderr, "Traceback (most recent call last)") || strings.Contains(r.Stderr, "stockade") {
		t.Errorf("a single-use run's syntax error is the code's line and the error only: %+v", r.Result)
	}
}

// A network attempt in a jail without network: the model must read why,
// in the text it gets (stderr, and MCP's text content), not only in the
// network list many hosts never show it. The line is the CLI's own,
// marked as stockade's, after the program's output.
func TestNetworkRefusalIsInTheText(t *testing.T) {
	s := startServer(t, "--pool", "1")
	const probe = "import socket\ntry:\n    socket.getaddrinfo('example.com', 443)\nexcept OSError as e:\n    print('lookup failed:', e)\n"
	const want = "stockade: network: this jail has no network (name lookup via 127.0.0.1:53 refused); see --allow-net\n"
	id := s.session(api.SessionRequest{}).SessionID
	r := s.cell(id, probe)
	if r.Verdict != api.ExecOK || !strings.HasPrefix(r.Stdout, "lookup failed:") || r.Stderr != want || r.StderrBytes != 0 {
		t.Errorf("a session's exec: stderr %q, want %q: %+v", r.Stderr, want, r)
	}
	if r := s.cell(id, "import sys\nprint('own', end='', file=sys.stderr)\n"+probe); r.Stderr != "own\n"+want {
		t.Errorf("the line after the cell's own stderr: %q", r.Stderr)
	}
	if r := s.cell(id, "1"); r.Stderr != "" {
		t.Errorf("an exec without network attempts gets no line: %q", r.Stderr)
	}
	run := s.run(api.RunRequest{Code: code(probe)})
	if run.Stderr != want {
		t.Errorf("a single-use run's stderr %q, want %q", run.Stderr, want)
	}
	// Streamed, the line is the stream's last stderr line, before the result.
	for _, path := range []string{"/v1/sessions/" + id + "/exec", "/v1/run"} {
		_, body := s.call("POST", path, map[string]any{"code": probe}, map[string]string{"Accept": api.NDJSON})
		lines := strings.Split(strings.TrimSpace(string(body)), "\n")
		var stderr string
		for _, l := range lines[:len(lines)-1] {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["type"] == "stderr" {
				stderr += m["data"].(string)
			}
		}
		var last map[string]any
		if json.Unmarshal([]byte(lines[len(lines)-1]), &last); stderr != want || last["type"] != "result" || last["stderr"] != want {
			t.Errorf("%s streamed: stderr lines %q, result %v", path, stderr, last["stderr"])
		}
	}

	cs := mcpSession(t, s)
	for _, args := range []map[string]any{{"code": probe}, {"code": probe, "session_id": id}} {
		res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "run_python", Arguments: args})
		if err != nil || !strings.Contains(mcpText(res), "stderr:\n"+want) {
			t.Errorf("MCP run_python %v: the text says nothing of the refusal: %v\n%s", args["session_id"], err, mcpText(res))
		}
	}
}

// needDataStack skips unless the host's Python (the jail's) has pandas,
// matplotlib and IPython (python3-pandas, python3-matplotlib,
// python3-ipython; scripts/deps check installs them).
func needDataStack(t *testing.T) {
	t.Helper()
	if err := exec.Command("/usr/bin/python3", "-c", "import pandas, matplotlib, IPython").Run(); err != nil {
		t.Skip("the data stack is not installed (python3-pandas, python3-matplotlib, python3-ipython)")
	}
}

// dataProfile is the python profile with room for the data stack's first
// imports on a loaded machine (pandas, matplotlib and IPython in one
// cell take seconds of the 10 s default when seven builds share two
// cores), and extra lines of TOML.
func dataProfile(t *testing.T, extra string) string {
	t.Helper()
	prof := filepath.Join(t.TempDir(), "data.toml")
	if err := os.WriteFile(prof, []byte("extends = \"python\"\n[limits]\ntimeout = \"60s\"\n"+extra), 0o644); err != nil {
		t.Fatal(err)
	}
	return prof
}

// plain is a result's text/plain ("" if it has none or it is not a string).
func plain(r api.RichResult) string { return mimeText(r, "text/plain") }

func mimeText(r api.RichResult, mime string) string {
	var s string
	_ = json.Unmarshal(r.Data[mime], &s)
	return s
}

// isPNG says whether a result carries a PNG the image package decodes.
func isPNG(r api.RichResult) bool {
	b, err := base64.StdEncoding.DecodeString(mimeText(r, "image/png"))
	if err != nil {
		return false
	}
	_, err = png.Decode(bytes.NewReader(b))
	return err == nil
}

// A cell's results as a notebook shows them, in order: display() anywhere
// in the cell (the builtin, and IPython's once imported), the last
// expression's value (is_main_result), then the figures left open; a
// DataFrame as text and HTML, a figure as PNG and, on request, SVG. The
// older fields stay as they were.
func TestSessionRichResults(t *testing.T) {
	needDataStack(t)
	s := startServer(t, "--pool", "1", "--profile", dataProfile(t, ""))
	id := s.session(api.SessionRequest{}).SessionID
	r := s.cell(id, "import pandas as pd\nimport matplotlib.pyplot as plt\n"+
		"display('first')\ndf = pd.DataFrame({'a': [1, 2], 'b': [3, 4]})\ndisplay(df)\n"+
		"plt.plot([1, 2, 3])\nprint('printed')\ndf")
	if r.Verdict != api.ExecOK || r.Stdout != "printed\n" || len(r.Results) != 4 || r.ResultsTruncated {
		t.Fatalf("four results: %+v", r)
	}
	table := "   a  b\n0  1  3\n1  2  4"
	first, shown, main, fig := r.Results[0], r.Results[1], r.Results[2], r.Results[3]
	if plain(first) != "'first'" || len(first.Data) != 1 || first.IsMainResult {
		t.Errorf("display('first'): %+v", first)
	}
	for _, df := range []api.RichResult{shown, main} {
		if plain(df) != table || !strings.Contains(mimeText(df, "text/html"), "<table") {
			t.Errorf("a DataFrame as text and HTML: %q %q", plain(df), mimeText(df, "text/html"))
		}
	}
	if shown.IsMainResult || !main.IsMainResult || fig.IsMainResult {
		t.Errorf("is_main_result only on the last expression's: %v %v %v", shown.IsMainResult, main.IsMainResult, fig.IsMainResult)
	}
	if !strings.HasPrefix(plain(fig), "<Figure size") || !isPNG(fig) || fig.Data["image/svg+xml"] != nil {
		t.Errorf("the figure left open, as PNG only: %q %v", plain(fig), fig.Data["image/svg+xml"] != nil)
	}
	if !resultIs(r, table) || len(r.Images) != 1 {
		t.Errorf("result and images as before: %v %d", r.Result, len(r.Images))
	}
	if r := s.cell(id, "display.__globals__['_state']['formatter'] is not None"); !resultIs(r, "True") {
		t.Errorf("the DataFrame was formatted by IPython's DisplayFormatter, which the root has: %+v", r)
	}

	r = s.exec(id, api.ExecRequest{Code: ptr("from IPython.display import display, HTML, Markdown\n" +
		"display(HTML('<b>bold</b>'), Markdown('*it*'))\nfig = plt.figure()\nplt.bar([1], [2])\ndisplay(fig)\n1 + 1"),
		FigureFormats: []string{"png", "svg"}})
	if r.Verdict != api.ExecOK || len(r.Results) != 4 {
		t.Fatalf("IPython's display, a figure displayed, then 1 + 1: %+v %+v", r, r.Error)
	}
	if mimeText(r.Results[0], "text/html") != "<b>bold</b>" || mimeText(r.Results[1], "text/markdown") != "*it*" {
		t.Errorf("IPython's display adds results: %+v %+v", r.Results[0], r.Results[1])
	}
	if f := r.Results[2]; !isPNG(f) || !strings.Contains(mimeText(f, "image/svg+xml"), "<svg") {
		t.Errorf("display(fig) with figure_formats png and svg: %v", f.Data)
	}
	if m := r.Results[3]; plain(m) != "2" || !m.IsMainResult || len(m.Data) != 1 || r.ExecutionCount != 3 {
		t.Errorf("1 + 1, once (the displayed figure is not shown again): %+v", r.Results)
	}
	if r := s.cell(id, "x = 1"); len(r.Results) != 0 || r.Results == nil {
		t.Errorf("no results: an empty list: %+v", r.Results)
	}
	code, body := s.call("POST", "/v1/sessions/"+id+"/exec", map[string]any{"code": "1", "figure_formats": []string{"gif"}}, nil)
	if code != 400 || !strings.Contains(string(body), "figure_formats") {
		t.Errorf("figure_formats gif: %d %s", code, body)
	}
}

// A root without IPython (here the host's, with IPython's package
// hidden under an empty directory) gets its results from the standard
// library: the _repr_*_ methods an object offers, and repr.
func TestSessionRichResultsWithoutIPython(t *testing.T) {
	needDataStack(t)
	ipython := "/usr/lib/python3/dist-packages/IPython"
	if _, err := os.Stat(ipython); err != nil {
		t.Skip("IPython is not where Debian puts it")
	}
	empty := socketDir(t) // 0755 on a path others can search: the jail user opens it
	prof := dataProfile(t, "[filesystem]\nro = [\""+empty+":"+ipython+"\"]\n")
	s := startServer(t, "--pool", "1", "--profile", prof)
	id := s.session(api.SessionRequest{}).SessionID
	r := s.cell(id, "import importlib.util\nassert importlib.util.find_spec('IPython.core') is None\n"+
		"import pandas as pd\nclass Both:\n    def _repr_markdown_(self): return '**md**'\n    def __repr__(self): return 'Both()'\n"+
		"display(Both())\npd.DataFrame({'a': [1]})")
	if r.Verdict != api.ExecOK || len(r.Results) != 2 {
		t.Fatalf("two results without IPython: %+v %+v", r, r.Error)
	}
	if b := r.Results[0]; plain(b) != "Both()" || mimeText(b, "text/markdown") != "**md**" {
		t.Errorf("a _repr_markdown_ without IPython: %+v", b)
	}
	if m := r.Results[1]; !m.IsMainResult || plain(m) != "   a\n0  1" || !strings.Contains(mimeText(m, "text/html"), "<table") {
		t.Errorf("a DataFrame without IPython: %+v", m)
	}
	if r := s.cell(id, "import sys\n'IPython.core' in sys.modules"); !resultIs(r, "False") {
		t.Errorf("nothing of IPython was loaded: %+v", r)
	}
}

// The driver runs in the cell's interpreter: a cell can reach its
// results list and put anything there. The server keeps at most 64
// results, each a plain MIME bundle within its caps, and drops the rest.
func TestAttackSessionForgesRichResults(t *testing.T) {
	s := startServer(t, "--pool", "1")
	id := s.session(api.SessionRequest{}).SessionID
	r := s.cell(id, `res = display.__globals__['_state']['results'].list
ok = {'data': {'text/plain': 'ok'}, 'is_main_result': False, 'truncated': False}
res.append({'data': {'text/plain': 'x', 'Text/HTML': '<script>'}, 'is_main_result': False, 'truncated': False})
res.append({'data': {'text/plain': 'x', 'image/png': 'bm90IGEgcG5n'}, 'is_main_result': False, 'truncated': False})
res.append({'data': {'text/plain': 'x', 'application/pdf': 'abc'}, 'is_main_result': False, 'truncated': False})
res.append({'data': {'text/html': 'no text/plain'}, 'is_main_result': False, 'truncated': False})
res.append({'data': {'text/plain': 7}, 'is_main_result': False, 'truncated': False})
res.append({'data': {'text/plain': 'x' * (3 << 20)}, 'is_main_result': False, 'truncated': False})
res.append({'data': dict({'text/plain': 'x'}, **{'a/t%d' % i: 'v' for i in range(20)}), 'is_main_result': False, 'truncated': False})
res.extend([ok] * 1000)
`)
	if r.Verdict != api.ExecOK || r.State != "kept" {
		t.Fatalf("the forged results are the cell's own business, not an error: %+v", r)
	}
	if len(r.Results) != 64 || !r.ResultsTruncated {
		t.Fatalf("want 64 results, truncated: %d %v", len(r.Results), r.ResultsTruncated)
	}
	for i, res := range r.Results {
		if plain(res) != "ok" || len(res.Data) != 1 {
			t.Fatalf("result %d is not one the server should keep: %v", i, res.Data)
		}
	}
}

// Over MCP the model reads each rich result's text and sees each figure
// as an image; the structured content keeps the bundles (HTML for a UI)
// without the images' base64, which the image contents carry.
func TestMCPRichResults(t *testing.T) {
	needDataStack(t)
	s := startServer(t, "--pool", "1", "--profile", dataProfile(t, ""))
	id := s.session(api.SessionRequest{}).SessionID
	cs := mcpSession(t, s)
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "run_python", Arguments: map[string]any{"session_id": id,
		"code": "import pandas as pd\nimport matplotlib.pyplot as plt\ndisplay('shown')\nplt.plot([1, 4, 9])\npd.DataFrame({'a': [1, 2]})"}})
	if err != nil || res.IsError {
		t.Fatalf("run_python: %v %s", err, mcpText(res))
	}
	txt := mcpText(res)
	for _, want := range []string{"display: 'shown'\n", "result:    a\n0  1\n1  2\n[also as text/html, in the structured content]\n", "display: <Figure size", "figures: 1"} {
		if !strings.Contains(txt, want) {
			t.Errorf("the text lacks %q:\n%s", want, txt)
		}
	}
	var images int
	for _, c := range res.Content {
		if ic, ok := c.(*sdk.ImageContent); ok && ic.MIMEType == "image/png" && bytes.HasPrefix(ic.Data, []byte("\x89PNG")) {
			images++
		}
	}
	if images != 1 {
		t.Errorf("want the figure as one PNG image content, got %d", images)
	}
	sc, _ := json.Marshal(res.StructuredContent)
	var got struct {
		Results []struct {
			Data         map[string]any `json:"data"`
			IsMainResult bool           `json:"is_main_result"`
			Omitted      map[string]int `json:"omitted"`
		} `json:"results"`
	}
	if err := json.Unmarshal(sc, &got); err != nil || len(got.Results) != 3 {
		t.Fatalf("structured content: %v %.500s", err, sc)
	}
	if html, _ := got.Results[1].Data["text/html"].(string); !strings.Contains(html, "<table") || !got.Results[1].IsMainResult {
		t.Errorf("the DataFrame's HTML in the structured content: %+v", got.Results[1])
	}
	if fig := got.Results[2]; fig.Data["image/png"] != nil || fig.Omitted["image/png"] < 1000 {
		t.Errorf("the figure's PNG is an image content, only its size in the structured content: %+v", fig.Omitted)
	}
}

// A single-use run's results have the session's shape: each display() in
// order, then each figure left open (a script has no last expression).
// The program owns /work, where the bootstrap leaves them for the
// server: a results file it wrote itself is held to the same caps.
func TestRunRichResults(t *testing.T) {
	needDataStack(t)
	s := startServer(t, "--pool", "1", "--profile", dataProfile(t, ""))
	r := s.run(api.RunRequest{Code: code("import pandas as pd\nimport matplotlib.pyplot as plt\n" +
		"display(pd.DataFrame({'a': [1]}))\nplt.plot([1, 2])\nprint('hi')\n")})
	if r.Verdict != jail.VerdictOK || r.Stdout != "hi\n" || len(r.Results) != 2 || r.ResultsTruncated || len(r.Images) != 1 {
		t.Fatalf("a DataFrame displayed and a figure: %+v %+v", r.Result, r.Results)
	}
	if df := r.Results[0]; plain(df) != "   a\n0  1" || !strings.Contains(mimeText(df, "text/html"), "<table") || df.IsMainResult {
		t.Errorf("the DataFrame: %+v", df)
	}
	if fig := r.Results[1]; !isPNG(fig) || !strings.HasPrefix(plain(fig), "<Figure size") {
		t.Errorf("the figure: %+v", fig)
	}
	if _, ok := r.Files[".stockade-figures"]; ok || len(r.Files) != 0 {
		t.Errorf("the results' file is not one of the run's files: %v", r.Files)
	}
	if r := s.run(api.RunRequest{Code: code("print(1)")}); len(r.Results) != 0 || r.Results == nil || r.ResultsTruncated {
		t.Errorf("no results: an empty list: %+v", r.Results)
	}
	r = s.run(api.RunRequest{Code: code(`import json, os
os.makedirs('/work/.stockade-figures', exist_ok=True)
ok = {'data': {'text/plain': 'ok'}, 'is_main_result': False, 'truncated': False}
bad = {'data': {'text/plain': 'x', 'image/png': 'bm90IGEgcG5n'}, 'is_main_result': False, 'truncated': False}
json.dump({'results': [bad] + [ok] * 100, 'truncated': False}, open('/work/.stockade-figures/results.json', 'w'))
os._exit(0)
`)})
	if len(r.Results) != 64 || !r.ResultsTruncated || plain(r.Results[0]) != "ok" {
		t.Errorf("a results file the program wrote: %d results, truncated %v", len(r.Results), r.ResultsTruncated)
	}
	r = s.run(api.RunRequest{Code: code("import os\nos.makedirs('/work/.stockade-figures', exist_ok=True)\n" +
		"os.symlink('/etc/passwd', '/work/.stockade-figures/results.json')\nos._exit(0)\n")})
	if len(r.Results) != 0 || !r.ResultsTruncated {
		t.Errorf("a symlink for a results file is not followed: %+v %v", r.Results, r.ResultsTruncated)
	}
}
