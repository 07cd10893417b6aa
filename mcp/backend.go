package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/stockade/stockade/profiles"
)

// Backend runs what the tools ask for. Its answers are the server's JSON,
// decoded: the tools show them and hand them back as structured content.
type Backend interface {
	// Run runs code in a fresh single-use jail (POST /v1/run).
	Run(ctx context.Context, job Job) (*Outcome, error)
	// CreateSession starts a session (POST /v1/sessions).
	CreateSession(ctx context.Context) (map[string]any, error)
	// Exec runs code in a session (POST /v1/sessions/{id}/exec).
	Exec(ctx context.Context, sessionID string, job Job) (*Outcome, error)
	// CloseSession ends a session and returns its final accounting.
	CloseSession(ctx context.Context, sessionID string) (map[string]any, error)
	// ReadFile, WriteFile and ListFiles reach a session's /work. ReadFile
	// reads at most max bytes: a larger file is a *TooLarge, never read
	// whole.
	ReadFile(ctx context.Context, sessionID, path string, max int64) ([]byte, error)
	WriteFile(ctx context.Context, sessionID, path string, data []byte) error
	ListFiles(ctx context.Context, sessionID, dir string) (map[string]any, error)
	// Interrupt raises KeyboardInterrupt in the session's running exec
	// (POST /v1/sessions/{id}/interrupt).
	Interrupt(ctx context.Context, sessionID string) error
}

// Job is one piece of code to run, as a tool's arguments give it.
type Job struct {
	Code    string
	Stdin   string
	Timeout time.Duration // 0: the jail's own
	// OnOutput, when not nil, is given the program's output as it comes
	// ("stdout" or "stderr", and the text): the run is streamed (NDJSON).
	// It is called from the goroutine that reads the stream, and must not
	// block: the server cancels a run whose caller stops reading.
	OnOutput func(stream, text string)
}

// Outcome is a run's or an exec's result: the fields the text shows, and
// the whole object as the server sent it.
type Outcome struct {
	Verdict         string  `json:"verdict"`
	State           string  `json:"state"`     // sessions: "kept" or "lost"
	Why             string  `json:"why"`       // sessions: what ended the exec
	ExitCode        *int    `json:"exit_code"` // single-use runs
	Stdout          string  `json:"stdout"`
	Stderr          string  `json:"stderr"`
	StdoutTruncated bool    `json:"stdout_truncated"`
	StderrTruncated bool    `json:"stderr_truncated"`
	Result          *string `json:"result"`
	Images          []Image `json:"images"`
	// Results are an exec's rich results, each a MIME bundle.
	Results        []RichResult `json:"results"`
	FilesChanged   []string     `json:"files_changed"`
	ExecutionCount int          `json:"execution_count"`
	// Error is an exec's exception ({name, value, traceback}), or a
	// single-use run's set-up error (a string).
	Error json.RawMessage `json:"error"`

	Raw map[string]any `json:"-"`
}

// Exception is the exception a session's exec raised.
type Exception struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
}

// Exception returns the exec's exception, or nil.
func (o *Outcome) Exception() *Exception {
	var e Exception
	if len(o.Error) == 0 || o.Error[0] != '{' || json.Unmarshal(o.Error, &e) != nil {
		return nil
	}
	return &e
}

// SetupError returns a single-use run's error (the jail could not be set
// up), or "".
func (o *Outcome) SetupError() string {
	var s string
	if len(o.Error) == 0 || o.Error[0] != '"' || json.Unmarshal(o.Error, &s) != nil {
		return ""
	}
	return s
}

// RichResult is one result of a cell: MIME type -> value (text/plain
// always, an image's base64), as the server's docs give it.
type RichResult struct {
	Data         map[string]json.RawMessage `json:"data"`
	IsMainResult bool                       `json:"is_main_result"`
	Truncated    bool                       `json:"truncated"`
}

// text is the value of a text type, or "".
func (r RichResult) text(mime string) string {
	var s string
	_ = json.Unmarshal(r.Data[mime], &s)
	return s
}

// Image is one figure: "png", base64.
type Image struct {
	Type string `json:"type"`
	Data string `json:"data"`
}

// Limits are the limits a request carries, in the profile's syntax
// ("2s", "256M"); the server keeps each within its profile.
type Limits struct {
	Timeout     string   `json:"timeout,omitempty"`
	CPUTime     string   `json:"cpu_time,omitempty"`
	Memory      string   `json:"memory,omitempty"`
	CPUs        *float64 `json:"cpus,omitempty"`
	Pids        *int64   `json:"pids,omitempty"`
	OutputLimit string   `json:"output_limit,omitempty"`
}

// HTTPBackend is a Backend that speaks stockade serve's HTTP API.
type HTTPBackend struct {
	// Client reaches the server: its transport dials the server's socket,
	// or calls its handlers in process (NewHTTPBackend).
	Client *http.Client
	// Profile and Limits are sent with every run and session: the command
	// line's, never a tool's. A tool's timeout_seconds may only shorten
	// Limits.Timeout.
	Profile string
	Limits  *Limits
	// PoolMissed, when set, is told each time the server answers that a
	// run or session took a fresh jail because its limits are not the
	// profile's: the server's prepared jails have the profile's limits,
	// so Limits tighter than those miss them on every call.
	PoolMissed func(reason string)
}

// limitsMissPool is the server's reason for a fresh jail when a request's
// limits are not its profile's (PoolUse.Reason).
const limitsMissPool = "limits differ from the profile's"

// notePool tells PoolMissed about an answer's pool use ("pool": {"hit",
// "reason"}) that missed for the limits this backend sends.
func (b *HTTPBackend) notePool(answer map[string]any) {
	if b.PoolMissed == nil {
		return
	}
	if use, ok := answer["pool"].(map[string]any); ok && use["hit"] == false && use["reason"] == limitsMissPool {
		b.PoolMissed(limitsMissPool)
	}
}

// NewHTTPBackend returns a backend whose requests go through rt. It
// follows no redirect: every path it sends is one the API names.
func NewHTTPBackend(rt http.RoundTripper, profile string, limits *Limits) *HTTPBackend {
	return &HTTPBackend{Client: &http.Client{Transport: rt, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}, Profile: profile, Limits: limits}
}

// APIError is a request the server refused, or could not answer.
type APIError struct {
	Method, Path string
	Status       int    // 0: no answer
	Msg          string // the server's reason
}

func (e *APIError) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("stockade server: %s %s: %s", e.Method, e.Path, e.Msg)
	}
	return fmt.Sprintf("stockade server: %s %s: %d %s: %s", e.Method, e.Path, e.Status, http.StatusText(e.Status), e.Msg)
}

// maxAnswer bounds what one answer may hold: the server's --files-max and
// output caps keep real answers far below it.
const maxAnswer = 256 << 20

// TooLarge is an answer larger than its caller would take: it was not read
// past that.
type TooLarge struct {
	Method, Path string
	Size         int64 // the answer's length, or -1 when it did not say
	Max          int64
}

func (e *TooLarge) Error() string {
	if e.Size < 0 {
		return fmt.Sprintf("stockade server: %s %s: answer larger than %d bytes", e.Method, e.Path, e.Max)
	}
	return fmt.Sprintf("stockade server: %s %s: answer of %d bytes, larger than %d", e.Method, e.Path, e.Size, e.Max)
}

// do sends one request and returns the answer's body when it is 2xx.
func (b *HTTPBackend) do(ctx context.Context, method, path string, body io.Reader, contentType string) ([]byte, error) {
	return b.doMax(ctx, method, path, body, contentType, maxAnswer)
}

// doMax is do for an answer of at most max bytes. An answer that says it
// is longer is refused unread; one that does not say is read to max+1
// bytes at most. Each answer is held whole, so each caller's own bound
// matters: download_file's 1 MiB was checked after the whole file (16
// calls on a 60 MiB file took 2.1 GB of the server's memory).
func (b *HTTPBackend) doMax(ctx context.Context, method, path string, body io.Reader, contentType string, max int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://stockade"+path, body)
	if err != nil {
		return nil, &APIError{Method: method, Path: path, Msg: err.Error()}
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := b.Client.Do(req)
	if err != nil {
		return nil, &APIError{Method: method, Path: path, Msg: err.Error()}
	}
	defer resp.Body.Close()
	return answer(method, path, resp, max)
}

// answer reads a whole answer of at most max bytes: its body when it is
// 2xx, else the server's reason as an APIError (with the body, which a
// run's 500 uses).
func answer(method, path string, resp *http.Response, max int64) ([]byte, error) {
	size := resp.ContentLength
	if size < 0 {
		// An in-process answer (POST /v1/mcp) has its length in its
		// header alone.
		if n, err := strconv.ParseInt(resp.Header.Get("Content-Length"), 10, 64); err == nil && n >= 0 {
			size = n
		}
	}
	if size > max {
		return nil, &TooLarge{Method: method, Path: path, Size: size, Max: max}
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		return nil, &APIError{Method: method, Path: path, Status: resp.StatusCode, Msg: "reading the answer: " + err.Error()}
	}
	if int64(len(data)) > max {
		return nil, &TooLarge{Method: method, Path: path, Size: -1, Max: max}
	}
	if resp.StatusCode/100 == 2 {
		return data, nil
	}
	var refusal struct {
		Error string `json:"error"`
	}
	msg := strings.TrimSpace(string(data))
	if json.Unmarshal(data, &refusal) == nil && refusal.Error != "" {
		msg = refusal.Error
	}
	return data, &APIError{Method: method, Path: path, Status: resp.StatusCode, Msg: msg}
}

func (b *HTTPBackend) postJSON(ctx context.Context, path string, v any) ([]byte, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return b.do(ctx, http.MethodPost, path, bytes.NewReader(body), "application/json")
}

// timeout is the timeout a run may ask for: the tool's, refused above the
// command line's.
func (b *HTTPBackend) timeout(d time.Duration) (string, error) {
	if d == 0 {
		return "", nil
	}
	if b.Limits != nil && b.Limits.Timeout != "" {
		ceiling, err := profiles.ParseDuration(b.Limits.Timeout)
		if err == nil && d > ceiling {
			return "", fmt.Errorf("timeout_seconds %v is above this server's timeout of %v", d.Seconds(), ceiling)
		}
	}
	return formatDuration(d), nil
}

func formatDuration(d time.Duration) string {
	return fmt.Sprintf("%dms", max(1, d.Milliseconds()))
}

func (b *HTTPBackend) Run(ctx context.Context, job Job) (*Outcome, error) {
	req := map[string]any{"code": job.Code}
	if job.Stdin != "" {
		req["stdin"] = job.Stdin
	}
	if b.Profile != "" {
		req["profile"] = b.Profile
	}
	var limits Limits
	if b.Limits != nil {
		limits = *b.Limits
	}
	t, err := b.timeout(job.Timeout)
	if err != nil {
		return nil, err
	}
	if t != "" {
		limits.Timeout = t
	}
	if limits != (Limits{}) {
		req["limits"] = limits
	}
	data, err := b.post(ctx, "/v1/run", req, job.OnOutput)
	// A run whose jail could not be set up is answered 500 with a result:
	// it is the run's outcome, verdict "error".
	var ae *APIError
	if err != nil && !(errors.As(err, &ae) && ae.Status == 500 && hasVerdict(data)) {
		return nil, err
	}
	o, err := decodeOutcome(data)
	if err == nil {
		b.notePool(o.Raw)
	}
	return o, err
}

func hasVerdict(data []byte) bool {
	var probe struct {
		Verdict *string `json:"verdict"`
	}
	return json.Unmarshal(data, &probe) == nil && probe.Verdict != nil
}

func decodeOutcome(data []byte) (*Outcome, error) {
	var o Outcome
	if err := json.Unmarshal(data, &o); err != nil {
		return nil, fmt.Errorf("stockade server: a result that is not JSON: %w", err)
	}
	if o.Verdict == "" {
		return nil, errors.New("stockade server: a result without a verdict")
	}
	if err := json.Unmarshal(data, &o.Raw); err != nil {
		return nil, fmt.Errorf("stockade server: a result that is not a JSON object: %w", err)
	}
	if o.Raw["type"] == "result" {
		delete(o.Raw, "type") // a stream's last line: the same object as unstreamed
	}
	return &o, nil
}

func (b *HTTPBackend) CreateSession(ctx context.Context) (map[string]any, error) {
	req := map[string]any{}
	if b.Profile != "" {
		req["profile"] = b.Profile
	}
	if b.Limits != nil && *b.Limits != (Limits{}) {
		req["limits"] = b.Limits
	}
	data, err := b.postJSON(ctx, "/v1/sessions", req)
	if err != nil {
		return nil, err
	}
	m, err := decodeObject(data)
	if err == nil {
		b.notePool(m)
	}
	return m, err
}

func (b *HTTPBackend) Exec(ctx context.Context, sessionID string, job Job) (*Outcome, error) {
	req := map[string]any{"code": job.Code}
	if job.Stdin != "" {
		req["stdin"] = job.Stdin
	}
	if job.Timeout > 0 {
		// The session's own ceiling is the command line's (CreateSession
		// sent it); the server refuses a longer one.
		req["timeout"] = formatDuration(job.Timeout)
	}
	data, err := b.post(ctx, sessionPath(sessionID)+"/exec", req, job.OnOutput)
	if err != nil {
		return nil, err
	}
	return decodeOutcome(data)
}

func (b *HTTPBackend) Interrupt(ctx context.Context, sessionID string) error {
	_, err := b.do(ctx, http.MethodPost, sessionPath(sessionID)+"/interrupt", nil, "")
	return err
}

// post is postJSON, streamed when onOutput is not nil: the answer asked
// for as NDJSON, each output line handed to onOutput as it comes, and the
// last line (the result, "type": "result") returned as the whole answer
// would have been. An answer that is not a stream (a refusal, a run whose
// jail could not be set up) is read as do reads it.
func (b *HTTPBackend) post(ctx context.Context, path string, v any, onOutput func(stream, text string)) ([]byte, error) {
	if onOutput == nil {
		return b.postJSON(ctx, path, v)
	}
	body, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://stockade"+path, bytes.NewReader(body))
	if err != nil {
		return nil, &APIError{Method: http.MethodPost, Path: path, Msg: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", ndjson)
	resp, err := b.Client.Do(req)
	if err != nil {
		return nil, &APIError{Method: http.MethodPost, Path: path, Msg: err.Error()}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), ndjson) {
		return answer(http.MethodPost, path, resp, maxAnswer)
	}
	// A line is one chunk of output or the result: the server's caps
	// keep both far below maxAnswer.
	r := bufio.NewReaderSize(io.LimitReader(resp.Body, maxAnswer+1), 64<<10)
	for {
		line, err := r.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var head struct {
				Type string `json:"type"`
				Data string `json:"data"`
			}
			if jerr := json.Unmarshal(line, &head); jerr != nil {
				return nil, &APIError{Method: http.MethodPost, Path: path, Status: resp.StatusCode, Msg: "a streamed line that is not JSON: " + jerr.Error()}
			}
			switch head.Type {
			case "stdout", "stderr":
				onOutput(head.Type, head.Data)
			case "result":
				return line, nil
			}
		}
		if err != nil {
			return nil, &APIError{Method: http.MethodPost, Path: path, Status: resp.StatusCode, Msg: "the stream ended without a result: " + err.Error()}
		}
	}
}

// ndjson is the media type of stockade serve's streamed answers.
const ndjson = "application/x-ndjson"

func (b *HTTPBackend) CloseSession(ctx context.Context, sessionID string) (map[string]any, error) {
	data, err := b.do(ctx, http.MethodDelete, sessionPath(sessionID), nil, "")
	if err != nil {
		return nil, err
	}
	return decodeObject(data)
}

func (b *HTTPBackend) ReadFile(ctx context.Context, sessionID, path string, max int64) ([]byte, error) {
	return b.doMax(ctx, http.MethodGet, filePath(sessionID, path), nil, "", max)
}

func (b *HTTPBackend) WriteFile(ctx context.Context, sessionID, path string, data []byte) error {
	_, err := b.do(ctx, http.MethodPut, filePath(sessionID, path), bytes.NewReader(data), "application/octet-stream")
	return err
}

func (b *HTTPBackend) ListFiles(ctx context.Context, sessionID, dir string) (map[string]any, error) {
	p := sessionPath(sessionID) + "/files"
	if dir != "" {
		p += "?path=" + url.QueryEscape(dir)
	}
	data, err := b.do(ctx, http.MethodGet, p, nil, "")
	if err != nil {
		return nil, err
	}
	return decodeObject(data)
}

func decodeObject(data []byte) (map[string]any, error) {
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("stockade server: an answer that is not a JSON object: %w", err)
	}
	return m, nil
}

// sessionPath escapes the id: it is the model's argument, and must name
// one session, never another route.
func sessionPath(id string) string {
	return "/v1/sessions/" + url.PathEscape(id)
}

// filePath escapes each component of a path in /work. The tools have
// checked it (checkPath): relative, no "." or ".." component, so it names
// a file of this session and no other route.
func filePath(id, path string) string {
	parts := strings.Split(path, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return sessionPath(id) + "/files/" + strings.Join(parts, "/")
}

// decodeBase64 decodes an image's data.
func decodeBase64(s string) ([]byte, error) {
	return base64.StdEncoding.DecodeString(s)
}
