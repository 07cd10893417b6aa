package server

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/profiles"
)

// SessionRequest is the body of POST /v1/sessions.
type SessionRequest struct {
	Profile string `json:"profile,omitempty"` // one of the server's profiles; "" the first
	Limits  Limits `json:"limits,omitempty"`  // as /v1/run's: each no looser than the profile's
	// IdleTimeout and TTL ("10m", "1h") end the session after so long
	// without a request, and so long after it began; at most, and by
	// default, --session-idle and --session-ttl.
	IdleTimeout string            `json:"idle_timeout,omitempty"`
	TTL         string            `json:"ttl,omitempty"`
	Files       map[string]string `json:"files,omitempty"` // path in /work -> base64
	Env         map[string]string `json:"env,omitempty"`   // the interpreter's environment, added
}

// SessionCreated is the answer to POST /v1/sessions (201).
type SessionCreated struct {
	SessionID     string        `json:"session_id"`
	Profile       string        `json:"profile"`
	Limits        SessionLimits `json:"limits"`
	CreatedAt     time.Time     `json:"created_at"`
	ExpiresAt     time.Time     `json:"expires_at"`
	IdleExpiresAt time.Time     `json:"idle_expires_at"`
	Pool          PoolUse       `json:"pool"`
}

// SessionLimits are the limits a session runs under: the profile's,
// tightened by the request's limits. Timeout, CPU time and output apply
// to each exec; memory, swap, CPUs and pids to the session's one cgroup,
// for its whole life; work to its /work.
type SessionLimits struct {
	TimeoutMs     int64   `json:"timeout_ms"`  // an exec's wall clock, at most
	CPUTimeMs     int64   `json:"cpu_time_ms"` // an exec's CPU time; 0 none
	OutputBytes   int64   `json:"output_bytes"`
	MemoryBytes   int64   `json:"memory_bytes"`
	SwapBytes     int64   `json:"swap_bytes"`
	CPUs          float64 `json:"cpus"`
	Pids          int64   `json:"pids"`
	WorkBytes     int64   `json:"work_bytes"`
	IdleTimeoutMs int64   `json:"idle_timeout_ms"`
	TTLMs         int64   `json:"ttl_ms"`
	Seccomp       string  `json:"seccomp"`
}

// ExecRequest is the body of POST /v1/sessions/{id}/exec.
type ExecRequest struct {
	Code    *string           `json:"code"`              // Python source: one cell
	Stdin   string            `json:"stdin,omitempty"`   // the cell's stdin
	Timeout string            `json:"timeout,omitempty"` // at most the session's
	Files   map[string]string `json:"files,omitempty"`   // path in /work -> base64, written first
	// FigureFormats are the formats of the figures among the results:
	// "png" (the default), "svg", or both.
	FigureFormats []string `json:"figure_formats,omitempty"`
	// Env is added to the interpreter's environment for this exec alone
	// (os.environ, and so every process the cell starts), then put back:
	// checkExecEnv says which names and how much.
	Env map[string]string `json:"env,omitempty"`
}

// TTLRequest is the body of POST /v1/sessions/{id}/ttl: the session ends
// this long from now ("30m"), as E2B's set_timeout.
type TTLRequest struct {
	TTL string `json:"ttl"`
}

// RestartResult is the answer to POST /v1/sessions/{id}/restart: 200
// whether or not the interpreter came back.
type RestartResult struct {
	SessionID string `json:"session_id"`
	// Restarted says a fresh interpreter answered: every variable, import
	// and process of the session is gone, /work and /tmp are kept.
	Restarted bool `json:"restarted"`
	// State is "fresh" when restarted, else "lost": the session ended.
	State    string       `json:"state"`
	Why      string       `json:"why,omitempty"`
	Python   string       `json:"python,omitempty"` // the fresh interpreter's version
	Restarts int          `json:"restarts"`         // the session's, this one counted
	WallMs   float64      `json:"wall_ms"`
	Session  SessionState `json:"session"`
}

// ExecError is the exception a cell raised, as Python formats it.
type ExecError struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
	// Truncated says the server cut the name, value or traceback at the
	// result cap, where the driver had not.
	Truncated bool `json:"truncated,omitempty"`
}

// RichResult is one result of a cell as a MIME bundle, Jupyter's shape
// and E2B's: data maps a MIME type to its value (text/plain always; an
// image's base64; a JSON type's JSON).
type RichResult struct {
	Data         map[string]json.RawMessage `json:"data"`
	IsMainResult bool                       `json:"is_main_result"` // the cell's last expression
	Truncated    bool                       `json:"truncated"`      // text/plain cut, or a type left out, to fit
}

// ExecVerdict says how an exec ended.
type ExecVerdict string

// The verdicts of an exec, in their order of precedence (execFacts.verdict).
const (
	ExecMemory      ExecVerdict = "memory"      // the kernel OOM-killed a process of the session
	ExecFailed      ExecVerdict = "error"       // the driver's channel broke, or the server failed
	ExecTimeout     ExecVerdict = "timeout"     // the exec ran past its timeout or CPU time
	ExecInterrupted ExecVerdict = "interrupted" // POST .../interrupt, or the caller went away
	ExecKilled      ExecVerdict = "killed"      // the session ended under it (the interpreter died, DELETE, TTL)
	ExecOutput      ExecVerdict = "output"      // stdout or stderr went past the limit and was cut
	ExecException   ExecVerdict = "exception"   // the cell raised
	ExecOK          ExecVerdict = "ok"
)

// ExecResult is the answer to an exec: 200 whatever its verdict.
type ExecResult struct {
	Type    string      `json:"type,omitempty"` // "result" in a stream
	Verdict ExecVerdict `json:"verdict"`
	// State says whether the session's Python state survived the exec:
	// "kept" only when the interpreter answered and lives on.
	State string `json:"state"`
	Why   string `json:"why,omitempty"` // what ended the exec, when not ok

	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdout_truncated"`
	StderrTruncated bool   `json:"stderr_truncated"`
	StdoutBytes     int64  `json:"stdout_bytes"`
	StderrBytes     int64  `json:"stderr_bytes"`

	Result          *string    `json:"result"` // repr of the cell's last expression
	ResultTruncated bool       `json:"result_truncated"`
	Error           *ExecError `json:"error"`
	Images          []Image    `json:"images"` // figures the cell left open, closed since
	ImagesTruncated bool       `json:"images_truncated"`
	// Results are the cell's rich results in order: each display() call,
	// the last expression's value (is_main_result) and each figure left
	// open.
	Results          []RichResult `json:"results"`
	ResultsTruncated bool         `json:"results_truncated"`
	// FilesChanged are the paths in /work the exec created or changed
	// (symlinks among them, listed, never followed); read them with the
	// files routes.
	// Names that are not UTF-8 are written as FSName writes them.
	FilesChanged          FSNames `json:"files_changed"`
	FilesChangedTruncated bool    `json:"files_changed_truncated"`
	ExecutionCount        int     `json:"execution_count"`

	WallMs float64 `json:"wall_ms"`
	CPUMs  float64 `json:"cpu_ms"`
	// PeakMemoryBytes is the most the session's cgroup held during the
	// exec (on cgroup v2, since the session began).
	PeakMemoryBytes uint64                 `json:"peak_memory_bytes"`
	BlockedSyscalls []jail.BlockedSyscall  `json:"blocked_syscalls"`
	Network         []jail.NetworkDecision `json:"network"`
	Session         SessionState           `json:"session"`
}

// SessionState is where the session stands after an exec.
type SessionState struct {
	ID            string         `json:"session_id"`
	Alive         bool           `json:"alive"`
	Ended         SessionVerdict `json:"ended,omitempty"` // the session's verdict, once ended
	ExpiresAt     time.Time      `json:"expires_at"`
	IdleExpiresAt time.Time      `json:"idle_expires_at"`
	Limits        SessionLimits  `json:"limits"`
}

// SessionInfo is GET /v1/sessions/{id}, and each of GET /v1/sessions.
type SessionInfo struct {
	SessionID       string         `json:"session_id"`
	Profile         string         `json:"profile"`
	Alive           bool           `json:"alive"`
	Busy            bool           `json:"busy"`
	ExecutionCount  int            `json:"execution_count"`
	Restarts        int            `json:"restarts"`          // POST .../restart that brought a fresh interpreter
	MemoryBytes     uint64         `json:"memory_bytes"`      // now
	PeakMemoryBytes uint64         `json:"peak_memory_bytes"` // the most, so far
	CPUMs           float64        `json:"cpu_ms"`
	CreatedAt       time.Time      `json:"created_at"`
	LastUsedAt      time.Time      `json:"last_used_at"`
	ExpiresAt       time.Time      `json:"expires_at"`
	IdleExpiresAt   time.Time      `json:"idle_expires_at"`
	EndedAt         *time.Time     `json:"ended_at"`
	Verdict         SessionVerdict `json:"verdict,omitempty"` // once ended
	Why             string         `json:"why,omitempty"`
	Limits          SessionLimits  `json:"limits"`
	Pool            PoolUse        `json:"pool"`
}

// SessionVerdict says why a session ended.
type SessionVerdict string

// The verdicts of a session's end.
const (
	SessionClosed      SessionVerdict = "closed"      // DELETE
	SessionIdle        SessionVerdict = "idle"        // no request for its idle timeout
	SessionTTL         SessionVerdict = "ttl"         // its lifetime ran out
	SessionMemory      SessionVerdict = "memory"      // the interpreter was OOM-killed
	SessionTimeout     SessionVerdict = "timeout"     // an exec's KeyboardInterrupt went unanswered
	SessionInterrupted SessionVerdict = "interrupted" // an interrupt's KeyboardInterrupt went unanswered
	SessionKilled      SessionVerdict = "killed"      // the interpreter exited or died otherwise
	SessionFailed      SessionVerdict = "error"       // the driver's channel broke
	SessionShutdown    SessionVerdict = "shutdown"    // the server stopped
)

// SessionEnd is the answer to DELETE /v1/sessions/{id}: the accounting of
// the whole session.
type SessionEnd struct {
	SessionID       string                 `json:"session_id"`
	Verdict         SessionVerdict         `json:"verdict"`
	Why             string                 `json:"why"`
	ExecutionCount  int                    `json:"execution_count"`
	CreatedAt       time.Time              `json:"created_at"`
	EndedAt         time.Time              `json:"ended_at"`
	WallMs          float64                `json:"wall_ms"`
	CPUMs           float64                `json:"cpu_ms"`
	PeakMemoryBytes uint64                 `json:"peak_memory_bytes"`
	PidsPeak        uint64                 `json:"pids_peak"`
	WorkPeakBytes   uint64                 `json:"work_peak_bytes"`
	BlockedSyscalls []jail.BlockedSyscall  `json:"blocked_syscalls"`
	Network         []jail.NetworkDecision `json:"network"`
}

// FileEntry is one entry of GET .../files?path=DIR.
type FileEntry struct {
	Name FSName `json:"name"` // not UTF-8: as FSName writes it

	Type string `json:"type"` // file, dir, symlink, other
	Size int64  `json:"size"`
}

// FileList is GET .../files?path=DIR.
type FileList struct {
	Path      string      `json:"path"`
	Entries   []FileEntry `json:"entries"`
	Truncated bool        `json:"truncated"`
}

// decodeJSON reads a session route's body: one JSON object, no unknown
// field, numbers kept as written (a limit's, for the profile decoder).
func decodeJSON(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return badRequest("field %q: want %s, got JSON %s", te.Field, te.Type, te.Value)
		}
		return badRequest("malformed JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("malformed JSON: data after the object")
	}
	return nil
}

// maxWorkPath bounds a path in /work: its bytes and its depth.
const (
	maxWorkPath  = 4096
	maxWorkDepth = 32
)

// checkWorkPath admits a relative path below /work: clean, no "." or
// ".." component, no NUL, no component over 255 bytes. The host opens it
// beneath /work without following symlinks whatever it says; this check
// gives a clear 400 instead of a failed open.
func checkWorkPath(p string) error {
	switch {
	case p == "" || p == ".":
		return badRequest("path %q: not a file in /work", p)
	case len(p) > maxWorkPath:
		return badRequest("path %.40q...: longer than %d bytes", p, maxWorkPath)
	case strings.IndexByte(p, 0) >= 0:
		return badRequest("path %q: contains NUL", p)
	case strings.HasPrefix(p, "/"):
		return badRequest("path %q: relative to /work, not absolute", p)
	case path.Clean(p) != p:
		return badRequest("path %q: not clean (want %q)", p, path.Clean(p))
	}
	parts := strings.Split(p, "/")
	if len(parts) > maxWorkDepth {
		return badRequest("path %q: deeper than %d", p, maxWorkDepth)
	}
	for _, c := range parts {
		if c == ".." {
			return badRequest("path %q: \"..\" leaves /work", p)
		}
		if len(c) > 255 {
			return badRequest("path %q: a name longer than 255 bytes", p)
		}
		if c == figureDir && len(parts) == 1 {
			return badRequest("path %q: reserved", p)
		}
	}
	return nil
}

// checkFiles checks a request's files (path -> base64).
func checkFiles(files map[string]string, max int) error {
	if len(files) > max {
		return badRequest("files: %d files, at most %d", len(files), max)
	}
	for name, data := range files {
		if err := checkWorkPath(name); err != nil {
			return badRequest("files: %s", err.(*apiError).Msg)
		}
		if _, err := base64.StdEncoding.DecodeString(data); err != nil {
			return badRequest("files[%q]: not base64: %v", name, err)
		}
	}
	return nil
}

// checkFigureFormats admits "png" and "svg", each once.
func checkFigureFormats(formats []string) error {
	seen := map[string]bool{}
	for _, f := range formats {
		if f != "png" && f != "svg" || seen[f] {
			return badRequest("figure_formats: %q: want \"png\", \"svg\" or both, each once", f)
		}
		seen[f] = true
	}
	return nil
}

// checkEnv checks a session's environment: names a shell could export,
// at most maxExecEnvVars of them and maxExecEnvBytes of names and values,
// as an exec's. The server holds it for the session's whole life (each
// restart starts the interpreter with it again), so without a bound a
// caller could make the server hold --max-body per session.
func checkEnv(env map[string]string) error {
	if len(env) > maxExecEnvVars {
		return badRequest("env: %d variables, at most %d", len(env), maxExecEnvVars)
	}
	total := 0
	for k, v := range env {
		total += len(k) + len(v)
		if k == "" || len(k) > maxEnvName || strings.ContainsAny(k, "=\x00") {
			return badRequest("env: name %.40q: want a name without '=' or NUL, at most %d bytes", k, maxEnvName)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return badRequest("env[%q]: value contains NUL", k)
		}
	}
	if total > maxExecEnvBytes {
		return badRequest("env: %d bytes of names and values, at most %d", total, maxExecEnvBytes)
	}
	return nil
}

// sessionDuration reads a session's idle timeout or lifetime: at most the
// server's ceiling (422 above it), the ceiling when not given.
func sessionDuration(field, v string, ceiling time.Duration) (time.Duration, error) {
	if v == "" {
		return ceiling, nil
	}
	d, err := profiles.ParseDuration(v)
	if err != nil {
		return 0, badRequest("%s: %v", field, err)
	}
	if d <= 0 {
		return 0, badRequest("%s: %q must be positive", field, v)
	}
	if d > ceiling {
		return 0, &apiError{Status: 422, Msg: fmt.Sprintf("%s: %v is above the server's ceiling of %v (--session-%s)", field, d, ceiling, map[string]string{"idle_timeout": "idle", "ttl": "ttl"}[field])}
	}
	return d, nil
}

// execTimeout reads an exec's timeout: at most the session's.
func execTimeout(v string, ceiling time.Duration) (time.Duration, error) {
	if v == "" {
		return ceiling, nil
	}
	d, err := profiles.ParseDuration(v)
	if err != nil {
		return 0, badRequest("timeout: %v", err)
	}
	if d <= 0 {
		return 0, badRequest("timeout: %q must be positive", v)
	}
	if d > ceiling {
		return 0, &apiError{Status: 422, Msg: fmt.Sprintf("timeout: %v is above the session's ceiling of %v", d, ceiling)}
	}
	return d, nil
}

// The bounds of an exec's env: a handful of settings and secrets for one
// cell, not a second way to ship data (files and stdin are that).
const (
	maxExecEnvVars  = 64
	maxExecEnvBytes = 32 << 10 // names and values, together
	maxEnvName      = 128
)

// reservedEnv are the names an exec's env may not set, each with the
// reason: what stockade or the jail relies on. A pattern ending in '*' is
// a prefix, one starting with '*' a suffix, any other the whole name. The
// cell can set any of them itself (os.environ); refusing them here keeps
// a caller's setting from changing, in silence, how every program the
// cell starts is loaded, what code it runs first and whom it trusts.
var reservedEnv = []struct{ pattern, why string }{
	{"LD_*", "the dynamic loader's: it would load code into every program the cell starts"},
	{"PYTHON*", "the start-up of every Python the cell starts (PYTHONPATH, PYTHONSTARTUP, PYTHONHOME); the session's interpreter is already running"},
	{"HTTP_PROXY*", "the jail's route to the hosts the operator allowed"},
	{"HTTPS_PROXY*", "the jail's route to the hosts the operator allowed"},
	{"ALL_PROXY*", "the jail's route to the hosts the operator allowed"},
	{"NO_PROXY*", "the jail's route to the hosts the operator allowed"},
	{"MPLCONFIGDIR", "matplotlib's font cache, which stockade builds once and binds read-only"},
	// A non-interactive bash sources $BASH_ENV, a POSIX sh started
	// interactively $ENV: a value would run its file's code before every
	// shell command the cell starts (subprocess, os.system).
	{"BASH_ENV", "bash sources that file before every bash -c the cell starts"},
	{"ENV", "sh and bash source that file at start-up"},
	// glibc reads these in every dynamically linked program: tunables
	// change its allocator and security hardening, GCONV_PATH names the
	// shared objects iconv loads.
	{"GLIBC_TUNABLES", "glibc's tunables, read by every program the cell starts"},
	{"GCONV_PATH", "where glibc's iconv loads its shared objects from: code in every program that converts a charset"},
	// OpenSSL's configuration can load engines and providers (shared
	// objects); the certificate settings choose whom TLS trusts.
	{"OPENSSL_CONF", "OpenSSL's configuration, which can load engines (code) into every program using TLS"},
	{"SSL_CERT_FILE", "the certificates every TLS client in the cell trusts"},
	{"SSL_CERT_DIR", "the certificates every TLS client in the cell trusts"},
	{"*_CA_BUNDLE", "the certificates requests, curl and the like trust (REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE)"},
	// Interpreters' start-up options: code run before the program.
	{"NODE_OPTIONS", "node's start-up options (--require runs a file's code first)"},
	{"PERL5OPT", "perl's start-up options (-M loads a module first)"},
}

// reserved says which reservedEnv pattern, if any, name k matches, case
// aside: the proxies, for one, are read in either case.
func reserved(k string) (pattern, why string, ok bool) {
	u := strings.ToUpper(k)
	for _, r := range reservedEnv {
		p := r.pattern
		switch {
		case strings.HasSuffix(p, "*"):
			ok = strings.HasPrefix(u, p[:len(p)-1])
		case strings.HasPrefix(p, "*"):
			ok = strings.HasSuffix(u, p[1:])
		default:
			ok = u == p
		}
		if ok {
			return p, r.why, true
		}
	}
	return "", "", false
}

// checkExecEnv checks an exec's env: at most maxExecEnvVars variables and
// maxExecEnvBytes in all, each name a portable shell name (letters,
// digits, underscore, not first a digit) and none of reservedEnv, no
// value with NUL.
func checkExecEnv(env map[string]string) error {
	if len(env) > maxExecEnvVars {
		return badRequest("env: %d variables, at most %d", len(env), maxExecEnvVars)
	}
	total := 0
	for k, v := range env {
		total += len(k) + len(v)
		if !envName(k) {
			return badRequest("env: name %.40q: want letters, digits and _ (not first a digit), at most %d bytes", k, maxEnvName)
		}
		if p, why, ok := reserved(k); ok {
			return badRequest("env: %s: an exec may not set %s: %s", k, p, why)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return badRequest("env[%q]: value contains NUL", k)
		}
	}
	if total > maxExecEnvBytes {
		return badRequest("env: %d bytes of names and values, at most %d", total, maxExecEnvBytes)
	}
	return nil
}

func envName(k string) bool {
	if k == "" || len(k) > maxEnvName || ('0' <= k[0] && k[0] <= '9') {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}
