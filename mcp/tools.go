package mcp

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/profiles"
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
	// Profile and Limits are sent with every run and session: the command
	// line's, never a tool's. A tool's timeout_seconds may only shorten
	// Limits' timeout.
	Profile string
	Limits  api.Limits
	// PoolMissed, when set, is told each time the server answers that a
	// run or session took a fresh jail because its limits are not the
	// profile's: the server's prepared jails have the profile's limits,
	// so Limits tighter than those miss them on every call.
	PoolMissed func(reason string)
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
	out := schemas()
	sdk.AddTool(s, &sdk.Tool{Name: "run_python", OutputSchema: out["run_python"], Description: "Run Python code in a jail and return its verdict, stdout, stderr, " +
		"the last expression's value and each display(obj) (sessions), the traceback of an exception and one image per matplotlib figure left open. " +
		"isError is set when the verdict is not ok."}, t.runPython)
	sdk.AddTool(s, &sdk.Tool{Name: "interrupt", OutputSchema: out["interrupt"], Description: "Interrupt the run_python call running in a session: " +
		"KeyboardInterrupt in its code, which then returns verdict interrupted with the session's state kept. " +
		"For a cell that runs too long; fails when no run_python call is running in the session."}, t.interrupt)
	sdk.AddTool(s, &sdk.Tool{Name: "create_session", OutputSchema: out["create_session"], Description: "Start a Python session: one long-lived jail whose variables, " +
		"imports and /work files stay between run_python calls that pass its session_id. Returns session_id, limits and expiry times."}, t.createSession)
	sdk.AddTool(s, &sdk.Tool{Name: "close_session", OutputSchema: out["close_session"], Description: "End a session and return its accounting (verdict, peaks, blocked system calls, network)."}, t.closeSession)
	sdk.AddTool(s, &sdk.Tool{Name: "upload_file", OutputSchema: out["upload_file"], Description: "Write a file into a session's /work (text, or base64 for binary)."}, t.uploadFile)
	sdk.AddTool(s, &sdk.Tool{Name: "download_file", OutputSchema: out["download_file"], Description: "Read a file from a session's /work: text as text, PNG/JPEG/GIF/WebP as an image, anything else as base64."}, t.downloadFile)
	sdk.AddTool(s, &sdk.Tool{Name: "list_files", OutputSchema: out["list_files"], Description: "List a directory of a session's /work: names, types and sizes."}, t.listFiles)
	return s
}

type tools struct {
	b    Backend
	opts Options
}

// limitsMissPool is the server's reason for a fresh jail when a request's
// limits are not its profile's (api.PoolUse.Reason).
const limitsMissPool = "limits differ from the profile's"

// notePool tells PoolMissed about an answer's pool use that missed for
// the limits this server sends.
func (t *tools) notePool(use api.PoolUse) {
	if t.opts.PoolMissed != nil && !use.Hit && use.Reason == limitsMissPool {
		t.opts.PoolMissed(limitsMissPool)
	}
}

// limits are the command line's limits with a tool's timeout, refused
// above the command line's.
func (t *tools) limits(timeout time.Duration) (api.Limits, error) {
	if timeout == 0 {
		return t.opts.Limits, nil
	}
	if s, ok := t.opts.Limits["timeout"].(string); ok {
		ceiling, err := profiles.ParseDuration(s)
		if err == nil && timeout > ceiling {
			return nil, fmt.Errorf("timeout_seconds %v is above this server's timeout of %v", timeout.Seconds(), ceiling)
		}
	}
	l := maps.Clone(t.opts.Limits)
	if l == nil {
		l = api.Limits{}
	}
	l["timeout"] = formatDuration(timeout)
	return l, nil
}

func formatDuration(d time.Duration) string {
	return fmt.Sprintf("%dms", max(1, d.Milliseconds()))
}

func (t *tools) runPython(ctx context.Context, req *sdk.CallToolRequest, a runArgs) (*sdk.CallToolResult, *RunOutput, error) {
	if a.TimeoutSeconds < 0 || math.IsNaN(a.TimeoutSeconds) || a.TimeoutSeconds > 1e6 {
		return nil, nil, fmt.Errorf("timeout_seconds %v: want a positive number of seconds", a.TimeoutSeconds)
	}
	timeout := time.Duration(a.TimeoutSeconds * float64(time.Second))
	var onOutput OutputFunc
	if tok := req.Params.GetProgressToken(); tok != nil && req.Session != nil {
		// The client asked for progress: the output as it comes, and a
		// beat while the code runs silent (progress.go).
		p := startProgress(ctx, req.Session, tok)
		defer p.stop()
		onOutput = p.output
	}
	if a.SessionID == "" {
		limits, err := t.limits(timeout)
		if err != nil {
			return nil, nil, err
		}
		res, err := t.b.Run(ctx, &api.RunRequest{Code: &a.Code, Stdin: a.Stdin, Profile: t.opts.Profile, Limits: limits}, onOutput)
		if err != nil {
			return nil, nil, refused(err)
		}
		t.notePool(res.Pool)
		return runResult(res), &RunOutput{Run: runView(res)}, nil
	}
	if err := checkSessionID(a.SessionID); err != nil {
		return nil, nil, err
	}
	exec := &api.ExecRequest{Code: &a.Code, Stdin: a.Stdin}
	if timeout > 0 {
		// The session's own ceiling is the command line's (create_session
		// sent it); the server refuses a longer one.
		exec.Timeout = formatDuration(timeout)
	}
	res, err := t.b.Exec(ctx, a.SessionID, exec, onOutput)
	if err != nil {
		return nil, nil, refused(err)
	}
	return execResult(res), &RunOutput{Exec: execView(res)}, nil
}

func (t *tools) interrupt(ctx context.Context, _ *sdk.CallToolRequest, a sessionArgs) (*sdk.CallToolResult, *InterruptOutput, error) {
	if err := checkSessionID(a.SessionID); err != nil {
		return nil, nil, err
	}
	if err := t.b.Interrupt(ctx, a.SessionID); err != nil {
		var ae *api.Error
		if errors.As(err, &ae) && ae.Status == http.StatusConflict {
			return nil, nil, fmt.Errorf("session %s runs no code now: nothing to interrupt", a.SessionID)
		}
		return nil, nil, refused(err)
	}
	text := fmt.Sprintf("interrupting session %s: its running run_python call ends with verdict interrupted, state kept (or, if the code ignores KeyboardInterrupt, the session is ended)", a.SessionID)
	return textResult(text), &InterruptOutput{SessionID: a.SessionID, Status: "interrupting"}, nil
}

func (t *tools) createSession(ctx context.Context, _ *sdk.CallToolRequest, _ noArgs) (*sdk.CallToolResult, *api.SessionCreated, error) {
	created, err := t.b.CreateSession(ctx, &api.SessionRequest{Profile: t.opts.Profile, Limits: t.opts.Limits})
	if err != nil {
		return nil, nil, refused(err)
	}
	t.notePool(created.Pool)
	text := fmt.Sprintf("session_id: %s\nexpires_at: %s\nidle_expires_at: %s\nPass session_id to run_python to keep state; close_session when done.",
		created.SessionID, created.ExpiresAt.Format(time.RFC3339Nano), created.IdleExpiresAt.Format(time.RFC3339Nano))
	return textResult(text), created, nil
}

func (t *tools) closeSession(ctx context.Context, _ *sdk.CallToolRequest, a sessionArgs) (*sdk.CallToolResult, *api.SessionEnd, error) {
	if err := checkSessionID(a.SessionID); err != nil {
		return nil, nil, err
	}
	end, err := t.b.CloseSession(ctx, a.SessionID)
	if err != nil {
		return nil, nil, refused(err)
	}
	text := fmt.Sprintf("session %s ended: %s (%s); %d execs, peak memory %d bytes, cpu %s ms",
		a.SessionID, end.Verdict, end.Why, end.ExecutionCount, end.PeakMemoryBytes, strconv.FormatFloat(end.CPUMs, 'f', -1, 64))
	return textResult(text), end, nil
}

func (t *tools) uploadFile(ctx context.Context, _ *sdk.CallToolRequest, a uploadArgs) (*sdk.CallToolResult, *UploadOutput, error) {
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
		return nil, nil, refused(err)
	}
	return textResult(fmt.Sprintf("wrote /work/%s (%d bytes)", a.Path, len(data))), &UploadOutput{Path: a.Path, Bytes: len(data)}, nil
}

func (t *tools) downloadFile(ctx context.Context, _ *sdk.CallToolRequest, a downloadArgs) (*sdk.CallToolResult, *DownloadOutput, error) {
	if err := checkSessionID(a.SessionID); err != nil {
		return nil, nil, err
	}
	if err := checkPath(&a.Path, false); err != nil {
		return nil, nil, err
	}
	data, err := t.readFile(ctx, a.SessionID, a.Path)
	if err != nil {
		return nil, nil, err
	}
	out := &DownloadOutput{Path: a.Path, Bytes: len(data)}
	res := &sdk.CallToolResult{}
	switch mime := http.DetectContentType(data); {
	case strings.HasPrefix(mime, "image/png"), strings.HasPrefix(mime, "image/jpeg"), strings.HasPrefix(mime, "image/gif"), strings.HasPrefix(mime, "image/webp"):
		out.Encoding, out.MIMEType = "image", mime
		res.Content = []sdk.Content{&sdk.ImageContent{Data: data, MIMEType: mime}}
	case utf8.Valid(data):
		out.Encoding = "text"
		res.Content = []sdk.Content{&sdk.TextContent{Text: string(data)}}
	default:
		out.Encoding = "base64"
		res.Content = []sdk.Content{&sdk.TextContent{Text: base64.StdEncoding.EncodeToString(data)}}
	}
	return res, out, nil
}

// readFile reads a file of at most MaxDownload bytes. The cap is kept
// while reading: checked after, the whole file was held first (16 calls
// on a 60 MiB file took 2.1 GB of the server's memory). A file that says
// it is larger is not read at all.
func (t *tools) readFile(ctx context.Context, id, path string) ([]byte, error) {
	max := t.opts.MaxDownload
	tooLarge := func(size string) error {
		return fmt.Errorf("/work/%s is%s more than the %d bytes this tool returns: read or summarise it with run_python", path, size, max)
	}
	f, size, err := t.b.OpenFile(ctx, id, path)
	if err != nil {
		return nil, refused(err)
	}
	defer f.Close()
	if size > int64(max) {
		return nil, tooLarge(fmt.Sprintf(" %d bytes,", size))
	}
	data, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if err != nil {
		return nil, fmt.Errorf("/work/%s: %w", path, err)
	}
	if len(data) > max {
		return nil, tooLarge("")
	}
	return data, nil
}

func (t *tools) listFiles(ctx context.Context, _ *sdk.CallToolRequest, a listArgs) (*sdk.CallToolResult, *api.FileList, error) {
	if err := checkSessionID(a.SessionID); err != nil {
		return nil, nil, err
	}
	if err := checkPath(&a.Path, true); err != nil {
		return nil, nil, err
	}
	list, err := t.b.ListFiles(ctx, a.SessionID, a.Path)
	if err != nil {
		return nil, nil, refused(err)
	}
	return textResult(listingText(list)), list, nil
}

// refused is a backend's error as the model reads it: a refusal with the
// server's status and reason, whether the server answered in process or
// over its socket.
func refused(err error) error {
	var ae *api.Error
	if errors.As(err, &ae) && ae.Status != 0 {
		return fmt.Errorf("stockade server: %d %s: %s", ae.Status, http.StatusText(ae.Status), ae.Msg)
	}
	return err
}

func textResult(text string) *sdk.CallToolResult {
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}}
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
