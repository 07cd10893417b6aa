package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stockade/stockade/api"
)

// fakeBackend records every call; what it answers is set per test.
type fakeBackend struct {
	mu    sync.Mutex
	calls []string
	run   *api.RunResponse
	exec  *api.ExecResult
	file  []byte
	size  int64 // OpenFile's size (0: the file's length)
}

func (f *fakeBackend) record(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, s)
}

func (f *fakeBackend) Run(_ context.Context, req *api.RunRequest, _ OutputFunc) (*api.RunResponse, error) {
	f.record("run " + *req.Code)
	return f.run, nil
}
func (f *fakeBackend) CreateSession(context.Context, *api.SessionRequest) (*api.SessionCreated, error) {
	f.record("create")
	return &api.SessionCreated{SessionID: "abc"}, nil
}
func (f *fakeBackend) Exec(_ context.Context, id string, req *api.ExecRequest, _ OutputFunc) (*api.ExecResult, error) {
	f.record("exec " + id + " " + *req.Code)
	return f.exec, nil
}
func (f *fakeBackend) CloseSession(_ context.Context, id string) (*api.SessionEnd, error) {
	f.record("close " + id)
	return &api.SessionEnd{Verdict: api.SessionClosed}, nil
}
func (f *fakeBackend) OpenFile(_ context.Context, id, p string) (io.ReadCloser, int64, error) {
	f.record("read " + id + " " + p)
	size := f.size
	if size == 0 {
		size = int64(len(f.file))
	}
	return io.NopCloser(bytes.NewReader(f.file)), size, nil
}
func (f *fakeBackend) WriteFile(_ context.Context, id, p string, data []byte) error {
	f.record("write " + id + " " + p + " " + string(data))
	return nil
}
func (f *fakeBackend) ListFiles(_ context.Context, id, dir string) (*api.FileList, error) {
	f.record("list " + id + " " + dir)
	return &api.FileList{Path: dir, Entries: []api.FileEntry{}}, nil
}

func (f *fakeBackend) Interrupt(_ context.Context, id string) error {
	f.record("interrupt " + id)
	return nil
}

// connect serves NewServer(b) to an SDK client in memory.
func connect(t *testing.T, b Backend) *sdk.ClientSession {
	return connectWith(t, b, nil)
}

// connectWith is connect for a client with opts.
func connectWith(t *testing.T, b Backend, opts *sdk.ClientOptions) *sdk.ClientSession {
	t.Helper()
	ct, st := sdk.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := NewServer(b, Options{Version: "test"}).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test"}, opts).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func call(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any) *sdk.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

func text(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestToolsListed(t *testing.T) {
	cs := connect(t, &fakeBackend{})
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		schema, _ := json.Marshal(tool.InputSchema)
		var s struct {
			AdditionalProperties *bool          `json:"additionalProperties"`
			Properties           map[string]any `json:"properties"`
		}
		if err := json.Unmarshal(schema, &s); err != nil {
			t.Fatal(err)
		}
		if s.AdditionalProperties == nil || *s.AdditionalProperties {
			t.Errorf("%s: input schema admits properties it does not name: %s", tool.Name, schema)
		}
		for p := range s.Properties {
			switch p {
			case "code", "session_id", "timeout_seconds", "stdin", "path", "content", "base64":
			default:
				t.Errorf("%s: unexpected argument %q: a tool's arguments may not carry the jail's policy", tool.Name, p)
			}
		}
	}
	if got := strings.Join(names, " "); got != "close_session create_session download_file interrupt list_files run_python upload_file" {
		t.Errorf("tools: %s", got)
	}
}

// TestAttackToolArgumentsLoosenJail: a model that adds the jail's policy to
// a tool call (a bigger memory limit, another profile, network hosts, an
// environment) is refused by the tool's schema before anything runs.
func TestAttackToolArgumentsLoosenJail(t *testing.T) {
	fb := &fakeBackend{run: &api.RunResponse{Result: &api.Result{Verdict: api.VerdictOK}}}
	cs := connect(t, fb)
	extras := map[string]any{
		"limits":    map[string]any{"memory": "64G", "timeout": "1h"},
		"profile":   "shell",
		"allow_net": []string{"*"},
		"allow-net": "example.com",
		"memory":    "64G",
		"timeout":   "1h",
		"env":       map[string]any{"LD_PRELOAD": "/work/x.so"},
		"seccomp":   "off",
	}
	base := map[string]map[string]any{
		"run_python":     {"code": "print(1)"},
		"create_session": {},
		"close_session":  {"session_id": "abc"},
		"upload_file":    {"session_id": "abc", "path": "a", "content": "x"},
		"download_file":  {"session_id": "abc", "path": "a"},
		"list_files":     {"session_id": "abc"},
		"interrupt":      {"session_id": "abc"},
	}
	for tool, args := range base {
		for k, v := range extras {
			a := map[string]any{k: v}
			for bk, bv := range args {
				a[bk] = bv
			}
			res := call(t, cs, tool, a)
			if !res.IsError || !strings.Contains(text(res), "additional properties") {
				t.Errorf("%s with %q: not refused by the schema: %s", tool, k, text(res))
			}
		}
	}
	if len(fb.calls) != 0 {
		t.Errorf("the backend was called: %v", fb.calls)
	}
}

func TestRunPythonResult(t *testing.T) {
	long := "a" + strings.Repeat("é", 20000) + "END"
	png := []byte("\x89PNG\r\n\x1a\nfigure")
	res1 := "42"
	o := &api.ExecResult{Verdict: api.ExecException, State: "kept", Stdout: long, Result: &res1,
		Error:  &api.ExecError{Name: "ZeroDivisionError", Value: "division by zero", Traceback: "Traceback (most recent call last):\nZeroDivisionError: division by zero\n"},
		Images: []api.Image{{Type: "png", Data: base64.StdEncoding.EncodeToString(png)}}}
	fb := &fakeBackend{exec: o}
	cs := connect(t, fb)
	res := call(t, cs, "run_python", map[string]any{"code": "1/0", "session_id": "abc"})
	if !res.IsError {
		t.Error("verdict exception: isError not set")
	}
	txt := text(res)
	for _, want := range []string{"verdict: exception (session state kept)", "ZeroDivisionError: division by zero", "result: 42", "bytes cut", "ENDEND"[3:], "figures: 1"} {
		if !strings.Contains(txt, want) {
			t.Errorf("text lacks %q:\n%.300s", want, txt)
		}
	}
	if len(txt) > maxShown+2000 {
		t.Errorf("text of %d bytes: long output not cut", len(txt))
	}
	if !strings.HasPrefix(strings.SplitN(txt, "stdout:\n", 2)[1], "aé") {
		t.Error("the head of stdout is not kept")
	}
	var images []*sdk.ImageContent
	for _, c := range res.Content {
		if ic, ok := c.(*sdk.ImageContent); ok {
			images = append(images, ic)
		}
	}
	if len(images) != 1 || string(images[0].Data) != string(png) || images[0].MIMEType != "image/png" {
		t.Errorf("images: %+v", images)
	}
	sc, _ := json.Marshal(res.StructuredContent)
	if strings.Contains(string(sc), base64.StdEncoding.EncodeToString(png)) || !strings.Contains(string(sc), `"bytes":14`) {
		t.Errorf("structured content keeps the image's bytes, or lacks its size: %.300s", sc)
	}
	if !strings.Contains(string(sc), "ENDEND"[3:]) {
		t.Error("structured content lost the whole stdout")
	}
	if fb.calls[0] != "exec abc 1/0" {
		t.Errorf("calls: %v", fb.calls)
	}

	fb.run = &api.RunResponse{Type: "result", Result: &api.Result{Verdict: api.VerdictOK, Stdout: "1\n"}, Files: api.FileMap{"out.csv": "eA=="}}
	res = call(t, cs, "run_python", map[string]any{"code": "print(1)"})
	if res.IsError || !strings.Contains(text(res), "files changed in /work: out.csv") {
		t.Errorf("ok run: isError %v, %s", res.IsError, text(res))
	}
	sc, _ = json.Marshal(res.StructuredContent)
	if strings.Contains(string(sc), "eA==") || !strings.Contains(string(sc), `"files_changed":["out.csv"]`) {
		t.Errorf("a single-use run's files: %s", sc)
	}
}

func TestCut(t *testing.T) {
	for _, tc := range []struct {
		in   string
		max  int
		want string
	}{
		{"short", 10, "short"},
		{"0123456789abcdef", 8, "0123\n[... 8 bytes cut ...]\ncdef"},
		{"ééééé", 4, "é\n[... 6 bytes cut ...]\né"},
	} {
		if got := cut(tc.in, tc.max); got != tc.want {
			t.Errorf("cut(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
		}
	}
}

// TestAttackPathLeavesSession: a session id or a path that would make the
// request's URL another route (another session, the session itself, a
// parent directory) is refused before any request is made.
func TestAttackPathLeavesSession(t *testing.T) {
	fb := &fakeBackend{file: []byte("x")}
	cs := connect(t, fb)
	for _, a := range []map[string]any{
		{"session_id": "../sessions", "path": "a"},
		{"session_id": "abc/exec", "path": "a"},
		{"session_id": "abc?x=1", "path": "a"},
		{"session_id": "", "path": "a"},
		{"session_id": "abc", "path": "../../other/files/a"},
		{"session_id": "abc", "path": "a/../../b"},
		{"session_id": "abc", "path": "./a"},
		{"session_id": "abc", "path": "a//b"},
		{"session_id": "abc", "path": "/etc/passwd"},
		{"session_id": "abc", "path": "a\x00b"},
	} {
		if res := call(t, cs, "download_file", a); !res.IsError {
			t.Errorf("download_file %v: not refused", a)
		}
	}
	if len(fb.calls) != 0 {
		t.Errorf("the backend was called: %v", fb.calls)
	}
	res := call(t, cs, "download_file", map[string]any{"session_id": "abc", "path": "/work/out/a.txt"})
	if res.IsError || fb.calls[0] != "read abc out/a.txt" {
		t.Errorf("a /work/ path: %v %s", fb.calls, text(res))
	}
}

func TestDownloadKinds(t *testing.T) {
	fb := &fakeBackend{}
	cs := connect(t, fb)
	for _, tc := range []struct {
		data     []byte
		encoding string
	}{
		{[]byte("hello\n"), "text"},
		{[]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"), "image"},
		{[]byte{0xff, 0x00, 0xfe}, "base64"},
	} {
		fb.file = tc.data
		res := call(t, cs, "download_file", map[string]any{"session_id": "abc", "path": "f"})
		sc, _ := json.Marshal(res.StructuredContent)
		if res.IsError || !strings.Contains(string(sc), `"encoding":"`+tc.encoding+`"`) {
			t.Errorf("%q: %s %s", tc.data, sc, text(res))
		}
	}
	fb.file = make([]byte, DefaultMaxDownload+1)
	if res := call(t, cs, "download_file", map[string]any{"session_id": "abc", "path": "f"}); !res.IsError {
		t.Error("a file over the cap was returned")
	}
}

func TestUploadDecodes(t *testing.T) {
	fb := &fakeBackend{}
	cs := connect(t, fb)
	call(t, cs, "upload_file", map[string]any{"session_id": "abc", "path": "d/b.bin", "content": base64.StdEncoding.EncodeToString([]byte("bin")), "base64": true})
	call(t, cs, "upload_file", map[string]any{"session_id": "abc", "path": "t.txt", "content": "text"})
	if res := call(t, cs, "upload_file", map[string]any{"session_id": "abc", "path": "x", "content": "!!", "base64": true}); !res.IsError {
		t.Error("bad base64 accepted")
	}
	if got := strings.Join(fb.calls, ";"); got != "write abc d/b.bin bin;write abc t.txt text" {
		t.Errorf("calls: %s", got)
	}
}

func TestTimeoutCeiling(t *testing.T) {
	tl := &tools{opts: Options{Limits: api.Limits{"timeout": "5s", "memory": "64M"}}}
	if _, err := tl.limits(6 * time.Second); err == nil {
		t.Error("a timeout above the command line's was accepted")
	}
	if got, err := tl.limits(1500 * time.Millisecond); err != nil || got["timeout"] != "1500ms" || got["memory"] != "64M" {
		t.Errorf("1.5s: %v %v", got, err)
	}
	if tl.opts.Limits["timeout"] != "5s" {
		t.Errorf("the command line's limits were changed: %v", tl.opts.Limits)
	}
	if got, _ := (&tools{}).limits(0); got != nil {
		t.Errorf("no timeout: %v", got)
	}
}

// Rich results: each a line of the text in order (display:, result:),
// each PNG an image, the structured content without the images' base64.
func TestRunPythonRichResults(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\nfigure")
	b64 := base64.StdEncoding.EncodeToString(png)
	raw := `[{"data": {"text/plain": "'shown'"}, "is_main_result": false, "truncated": false},
	         {"data": {"text/plain": "<Figure>", "image/png": "` + b64 + `"}, "is_main_result": false, "truncated": false},
	         {"data": {"text/plain": "   a\n0  1", "text/html": "<table>"}, "is_main_result": true, "truncated": true}]`
	var results []api.RichResult
	if err := json.Unmarshal([]byte(raw), &results); err != nil {
		t.Fatal(err)
	}
	res1 := "legacy repr"
	o := &api.ExecResult{Verdict: api.ExecOK, State: "kept", Result: &res1, Results: results,
		Images: []api.Image{{Type: "png", Data: b64}}}
	cs := connect(t, &fakeBackend{exec: o})
	res := call(t, cs, "run_python", map[string]any{"code": "x", "session_id": "abc"})
	txt := text(res)
	want := "display: 'shown'\ndisplay: <Figure>\nresult:    a\n0  1\n[also as text/html, in the structured content]\n[this result was cut to fit the server's caps]\nfigures: 1, as images after this text\n"
	if !strings.Contains(txt, want) || strings.Contains(txt, "legacy repr") {
		t.Errorf("text:\n%s\nwant it to hold:\n%s", txt, want)
	}
	var images int
	for _, c := range res.Content {
		if ic, ok := c.(*sdk.ImageContent); ok && string(ic.Data) == string(png) {
			images++
		}
	}
	if images != 1 {
		t.Errorf("the figure once as an image (the results carry it, images not again): %d", images)
	}
	sc, _ := json.Marshal(res.StructuredContent)
	if strings.Contains(string(sc), b64) || !strings.Contains(string(sc), `"omitted":{"image/png":14}`) || !strings.Contains(string(sc), `"text/html":"\u003ctable\u003e"`) {
		t.Errorf("structured content: %s", sc)
	}
}

// endless is a file's bytes as the server sends them, counted as read.
type endless struct{ read atomic.Int64 }

func (e *endless) Read(p []byte) (int, error) {
	e.read.Add(int64(len(p)))
	return len(p), nil
}

// download_file read the whole file, then refused it over its 1 MiB cap:
// through POST /v1/mcp, 16 calls on a 60 MiB file held 2.1 GB in the
// server. The tool reads no more than the cap (and one byte), and nothing
// of a file whose size says it is over.
func TestAttackMCPDownloadReadsWholeFile(t *testing.T) {
	for _, size := range []int64{-1, 60 << 20} {
		body := &endless{}
		cs := connect(t, &endlessFile{body: body, size: size})
		res := call(t, cs, "download_file", map[string]any{"session_id": "abc", "path": "big.bin"})
		if !res.IsError || !strings.Contains(text(res), "more than the 1048576 bytes this tool returns") {
			t.Errorf("a 60 MiB file (size %d): isError %v, %s", size, res.IsError, text(res))
		}
		want := int64(DefaultMaxDownload + 64<<10) // the cap, and a read's buffer past it
		if size >= 0 {
			want = 0
		}
		if n := body.read.Load(); n > want {
			t.Errorf("a 60 MiB file (size %d): %d bytes read, want at most %d", size, n, want)
		}
	}
}

// endlessFile opens every file as body, of the size given.
type endlessFile struct {
	fakeBackend
	body *endless
	size int64
}

func (f *endlessFile) OpenFile(context.Context, string, string) (io.ReadCloser, int64, error) {
	return io.NopCloser(f.body), f.size, nil
}

// TestToolsPublishOutputSchemas: every tool says the shape of its
// structured content (derived from its output type), and every answer has
// that shape: the SDK checks each against its schema and makes a call
// whose answer does not fit an error.
func TestToolsPublishOutputSchemas(t *testing.T) {
	png := base64.StdEncoding.EncodeToString([]byte("\x89PNG\r\n\x1a\nfigure"))
	sig, res1, setup := 9, "42", "no jail"
	fb := &fakeBackend{file: []byte("text\n"),
		run: &api.RunResponse{Type: "result", Result: &api.Result{Verdict: api.VerdictError, Signal: &sig, Error: &setup,
			BlockedSyscalls: []api.BlockedSyscall{{}}, Network: []api.NetworkDecision{{}}, CopyBack: &api.CopyBack{}},
			Files: api.FileMap{"a.csv": "eA=="}, FilesSkipped: api.SkippedList{"b"}, Images: []api.Image{{Type: "png", Data: png}},
			Results: []api.RichResult{{Data: map[string]json.RawMessage{"text/plain": []byte(`"x"`), "application/json": []byte(`{"a":[1]}`), "image/png": []byte(`"` + png + `"`)}}}},
		exec: &api.ExecResult{Verdict: api.ExecException, State: "kept", Result: &res1, Error: &api.ExecError{Name: "E"},
			FilesChanged: api.FSNames{"a"}, Images: []api.Image{{Type: "png", Data: png}}}}
	cs := connect(t, fb)
	list, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range list.Tools {
		schema, _ := json.Marshal(tool.OutputSchema)
		var s struct {
			Type  string `json:"type"`
			AnyOf []any  `json:"anyOf"`
		}
		if json.Unmarshal(schema, &s) != nil || s.Type != "object" || tool.Name == "run_python" && len(s.AnyOf) != 2 {
			t.Errorf("%s: output schema %.200s", tool.Name, schema)
		}
	}
	for _, c := range []struct {
		tool string
		args map[string]any
		want string // in the structured content
	}{
		{"run_python", map[string]any{"code": "x"}, `"files_changed":["a.csv"]`},
		{"run_python", map[string]any{"code": "x", "session_id": "abc"}, `"state":"kept"`},
		{"interrupt", map[string]any{"session_id": "abc"}, `"status":"interrupting"`},
		{"create_session", map[string]any{}, `"session_id":"abc"`},
		{"close_session", map[string]any{"session_id": "abc"}, `"verdict":"closed"`},
		{"upload_file", map[string]any{"session_id": "abc", "path": "a", "content": "x"}, `"bytes":1`},
		{"download_file", map[string]any{"session_id": "abc", "path": "a"}, `"encoding":"text"`},
		{"list_files", map[string]any{"session_id": "abc"}, `"entries":[]`},
	} {
		res := call(t, cs, c.tool, c.args)
		sc, _ := json.Marshal(res.StructuredContent)
		if strings.Contains(text(res), "validating tool output") || !strings.Contains(string(sc), c.want) {
			t.Errorf("%s: %s\n%.300s", c.tool, text(res), sc)
		}
		if strings.Contains(string(sc), png) || strings.Contains(string(sc), `"type":"result"`) || strings.Contains(string(sc), "eA==") {
			t.Errorf("%s: the structured content keeps bytes the content carries, or a stream's type: %.300s", c.tool, sc)
		}
	}
}
