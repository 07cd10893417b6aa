package mcp

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Every tool's arguments are a struct: the SDK infers each input schema
// with additionalProperties false and checks every call against it, so a
// call carrying "limits", "profile", "memory" or "allow_net" is refused
// before any handler runs. Nothing here may add such a field: the jail's
// policy is the command line's (doc.go).

type runArgs struct {
	Code           string  `json:"code" jsonschema:"Python source: one cell. In a session the last expression's value comes back as result, and display(obj) shows an object mid-cell, as a notebook does"`
	SessionID      string  `json:"session_id,omitempty" jsonschema:"a session from create_session: variables, imports and /work files stay from one call to the next. Without it the code runs in a fresh single-use jail that is destroyed afterwards"`
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty" jsonschema:"wall-clock limit of this run, at most the server's"`
	Stdin          string  `json:"stdin,omitempty" jsonschema:"the program's standard input"`
}

type noArgs struct{}

type sessionArgs struct {
	SessionID string `json:"session_id" jsonschema:"the session's id, from create_session"`
}

type uploadArgs struct {
	SessionID string `json:"session_id" jsonschema:"the session's id, from create_session"`
	Path      string `json:"path" jsonschema:"where in /work, relative (data/in.csv); directories are made"`
	Content   string `json:"content" jsonschema:"the file's content: text, or base64 when base64 is true"`
	Base64    bool   `json:"base64,omitempty" jsonschema:"content is base64 (for binary files)"`
}

type downloadArgs struct {
	SessionID string `json:"session_id" jsonschema:"the session's id, from create_session"`
	Path      string `json:"path" jsonschema:"a file in /work, relative (out/plot.png)"`
}

type listArgs struct {
	SessionID string `json:"session_id" jsonschema:"the session's id, from create_session"`
	Path      string `json:"path,omitempty" jsonschema:"a directory in /work, relative; empty for /work itself"`
}

// Options are what NewServer needs besides the backend.
type Options struct {
	Version string
	// MaxDownload bounds the bytes download_file hands the model (0:
	// DefaultMaxDownload).
	MaxDownload int
	// SchemaCache keeps the tools' schemas when a server is made per
	// request (stateless HTTP, each bound to its caller).
	SchemaCache *sdk.SchemaCache
}

// DefaultMaxDownload is the largest file download_file returns: a model's
// context is the limit, not the server's.
const DefaultMaxDownload = 1 << 20

// NewServer returns the MCP server with stockade's tools, run on b.
func NewServer(b Backend, opts Options) *sdk.Server {
	if opts.MaxDownload <= 0 {
		opts.MaxDownload = DefaultMaxDownload
	}
	s := sdk.NewServer(&sdk.Implementation{Name: "stockade", Version: opts.Version}, &sdk.ServerOptions{
		Instructions: "Runs Python in a locked-down jail (no network unless the operator allowed hosts, read-only system, " +
			"limits on memory, CPU and time set by the operator). run_python without session_id uses a fresh jail each time; " +
			"create_session keeps variables and files between run_python calls until close_session.",
		// No logging capability: the server logs nothing to the client.
		Capabilities: &sdk.ServerCapabilities{},
		SchemaCache:  opts.SchemaCache,
	})
	t := &tools{b: b, opts: opts}
	sdk.AddTool(s, &sdk.Tool{Name: "run_python", Description: "Run Python code in a jail and return its verdict, stdout, stderr, " +
		"the last expression's value and each display(obj) (sessions), the traceback of an exception and one image per matplotlib figure left open. " +
		"isError is set when the verdict is not ok."}, t.runPython)
	sdk.AddTool(s, &sdk.Tool{Name: "interrupt", Description: "Interrupt the run_python call running in a session: " +
		"KeyboardInterrupt in its code, which then returns verdict interrupted with the session's state kept. " +
		"For a cell that runs too long; fails when no run_python call is running in the session."}, t.interrupt)
	sdk.AddTool(s, &sdk.Tool{Name: "create_session", Description: "Start a Python session: one long-lived jail whose variables, " +
		"imports and /work files stay between run_python calls that pass its session_id. Returns session_id, limits and expiry times."}, t.createSession)
	sdk.AddTool(s, &sdk.Tool{Name: "close_session", Description: "End a session and return its accounting (verdict, peaks, blocked system calls, network)."}, t.closeSession)
	sdk.AddTool(s, &sdk.Tool{Name: "upload_file", Description: "Write a file into a session's /work (text, or base64 for binary)."}, t.uploadFile)
	sdk.AddTool(s, &sdk.Tool{Name: "download_file", Description: "Read a file from a session's /work: text as text, PNG/JPEG/GIF/WebP as an image, anything else as base64."}, t.downloadFile)
	sdk.AddTool(s, &sdk.Tool{Name: "list_files", Description: "List a directory of a session's /work: names, types and sizes."}, t.listFiles)
	return s
}

type tools struct {
	b    Backend
	opts Options
}

func (t *tools) runPython(ctx context.Context, req *sdk.CallToolRequest, a runArgs) (*sdk.CallToolResult, any, error) {
	if a.TimeoutSeconds < 0 || math.IsNaN(a.TimeoutSeconds) || a.TimeoutSeconds > 1e6 {
		return nil, nil, fmt.Errorf("timeout_seconds %v: want a positive number of seconds", a.TimeoutSeconds)
	}
	job := Job{Code: a.Code, Stdin: a.Stdin, Timeout: time.Duration(a.TimeoutSeconds * float64(time.Second))}
	if tok := req.Params.GetProgressToken(); tok != nil && req.Session != nil {
		// The client asked for progress: the output as it comes, and a
		// beat while the code runs silent (progress.go).
		p := startProgress(ctx, req.Session, tok)
		defer p.stop()
		job.OnOutput = p.output
	}
	var o *Outcome
	var err error
	if a.SessionID == "" {
		o, err = t.b.Run(ctx, job)
	} else {
		if err := checkSessionID(a.SessionID); err != nil {
			return nil, nil, err
		}
		o, err = t.b.Exec(ctx, a.SessionID, job)
	}
	if err != nil {
		return nil, nil, err
	}
	return outcomeResult(o, a.SessionID == ""), nil, nil
}

func (t *tools) interrupt(ctx context.Context, _ *sdk.CallToolRequest, a sessionArgs) (*sdk.CallToolResult, any, error) {
	if err := checkSessionID(a.SessionID); err != nil {
		return nil, nil, err
	}
	if err := t.b.Interrupt(ctx, a.SessionID); err != nil {
		var ae *APIError
		if errors.As(err, &ae) && ae.Status == http.StatusConflict {
			return nil, nil, fmt.Errorf("session %s runs no code now: nothing to interrupt", a.SessionID)
		}
		return nil, nil, err
	}
	text := fmt.Sprintf("interrupting session %s: its running run_python call ends with verdict interrupted, state kept (or, if the code ignores KeyboardInterrupt, the session is ended)", a.SessionID)
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}},
		StructuredContent: map[string]any{"session_id": a.SessionID, "status": "interrupting"}}, nil, nil
}

func (t *tools) createSession(ctx context.Context, _ *sdk.CallToolRequest, _ noArgs) (*sdk.CallToolResult, any, error) {
	m, err := t.b.CreateSession(ctx)
	if err != nil {
		return nil, nil, err
	}
	text := fmt.Sprintf("session_id: %v\nexpires_at: %v\nidle_expires_at: %v\nPass session_id to run_python to keep state; close_session when done.",
		m["session_id"], m["expires_at"], m["idle_expires_at"])
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}, StructuredContent: m}, nil, nil
}

func (t *tools) closeSession(ctx context.Context, _ *sdk.CallToolRequest, a sessionArgs) (*sdk.CallToolResult, any, error) {
	if err := checkSessionID(a.SessionID); err != nil {
		return nil, nil, err
	}
	m, err := t.b.CloseSession(ctx, a.SessionID)
	if err != nil {
		return nil, nil, err
	}
	text := fmt.Sprintf("session %s ended: %v (%v); %s execs, peak memory %s bytes, cpu %s ms",
		a.SessionID, m["verdict"], m["why"], number(m["execution_count"]), number(m["peak_memory_bytes"]), number(m["cpu_ms"]))
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}, StructuredContent: m}, nil, nil
}

func (t *tools) uploadFile(ctx context.Context, _ *sdk.CallToolRequest, a uploadArgs) (*sdk.CallToolResult, any, error) {
	if err := checkSessionID(a.SessionID); err != nil {
		return nil, nil, err
	}
	if err := checkPath(&a.Path, false); err != nil {
		return nil, nil, err
	}
	data := []byte(a.Content)
	if a.Base64 {
		var err error
		if data, err = base64.StdEncoding.DecodeString(a.Content); err != nil {
			return nil, nil, fmt.Errorf("content: not base64: %v", err)
		}
	}
	if err := t.b.WriteFile(ctx, a.SessionID, a.Path, data); err != nil {
		return nil, nil, err
	}
	text := fmt.Sprintf("wrote /work/%s (%d bytes)", a.Path, len(data))
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}},
		StructuredContent: map[string]any{"path": a.Path, "bytes": len(data)}}, nil, nil
}

func (t *tools) downloadFile(ctx context.Context, _ *sdk.CallToolRequest, a downloadArgs) (*sdk.CallToolResult, any, error) {
	if err := checkSessionID(a.SessionID); err != nil {
		return nil, nil, err
	}
	if err := checkPath(&a.Path, false); err != nil {
		return nil, nil, err
	}
	// The cap is the backend's to keep while it reads: checked after, the
	// whole file was held first.
	data, err := t.b.ReadFile(ctx, a.SessionID, a.Path, int64(t.opts.MaxDownload))
	var tl *TooLarge
	if errors.As(err, &tl) || err == nil && len(data) > t.opts.MaxDownload {
		size := ""
		if tl != nil && tl.Size >= 0 {
			size = fmt.Sprintf(" %d bytes,", tl.Size)
		}
		return nil, nil, fmt.Errorf("/work/%s is%s more than the %d bytes this tool returns: read or summarise it with run_python", a.Path, size, t.opts.MaxDownload)
	}
	if err != nil {
		return nil, nil, err
	}
	meta := map[string]any{"path": a.Path, "bytes": len(data)}
	res := &sdk.CallToolResult{StructuredContent: meta}
	switch mime := http.DetectContentType(data); {
	case strings.HasPrefix(mime, "image/png"), strings.HasPrefix(mime, "image/jpeg"), strings.HasPrefix(mime, "image/gif"), strings.HasPrefix(mime, "image/webp"):
		meta["encoding"], meta["mime_type"] = "image", mime
		res.Content = []sdk.Content{&sdk.ImageContent{Data: data, MIMEType: mime}}
	case utf8.Valid(data):
		meta["encoding"] = "text"
		res.Content = []sdk.Content{&sdk.TextContent{Text: string(data)}}
	default:
		meta["encoding"] = "base64"
		res.Content = []sdk.Content{&sdk.TextContent{Text: base64.StdEncoding.EncodeToString(data)}}
	}
	return res, nil, nil
}

func (t *tools) listFiles(ctx context.Context, _ *sdk.CallToolRequest, a listArgs) (*sdk.CallToolResult, any, error) {
	if err := checkSessionID(a.SessionID); err != nil {
		return nil, nil, err
	}
	if err := checkPath(&a.Path, true); err != nil {
		return nil, nil, err
	}
	m, err := t.b.ListFiles(ctx, a.SessionID, a.Path)
	if err != nil {
		return nil, nil, err
	}
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: listingText(m)}}, StructuredContent: m}, nil, nil
}

// checkSessionID admits what the server's ids are made of: random and
// URL-safe. Anything else is refused here rather than sent as a path. (A
// loop, not a regexp: `{1,128}` compiles to 128 copies, which cost every
// start of stockade 2 ms in this package's init.)
func checkSessionID(id string) error {
	ok := id != "" && len(id) <= 128
	for i := 0; ok && i < len(id); i++ {
		c := id[i]
		ok = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
	}
	if !ok {
		return fmt.Errorf("session_id %.40q: not a session id (create_session returns one)", id)
	}
	return nil
}

// checkPath admits a relative path below /work (a leading "/work/" is
// taken off: models write it): no empty, "." or ".." component, no NUL.
// The server checks again and opens it without following symlinks; this
// check keeps a path from naming another route.
func checkPath(path *string, emptyOK bool) error {
	p := *path
	if p == "/work" {
		p = ""
	}
	p = strings.TrimPrefix(p, "/work/")
	*path = p
	if p == "" {
		if emptyOK {
			return nil
		}
		return errors.New("path: empty; give a file in /work, relative (data/in.csv)")
	}
	if len(p) > 4096 || strings.IndexByte(p, 0) >= 0 {
		return fmt.Errorf("path %.40q: too long or contains NUL", p)
	}
	if strings.HasPrefix(p, "/") {
		return fmt.Errorf("path %q: relative to /work, not absolute (for /work/a.txt give a.txt)", p)
	}
	for _, c := range strings.Split(p, "/") {
		if c == "" || c == "." || c == ".." {
			return fmt.Errorf("path %q: a component is empty, \".\" or \"..\"", p)
		}
	}
	return nil
}
