package api

import (
	"encoding/json"
	"time"
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

// The verdicts of an exec (ExecResult.Verdict), in their order of
// precedence (the server's execFacts.verdict).
const (
	ExecMemory      Verdict = "memory"      // the kernel OOM-killed a process of the session
	ExecFailed      Verdict = "error"       // the driver's channel broke, or the server failed
	ExecTimeout     Verdict = "timeout"     // the exec ran past its timeout or CPU time
	ExecInterrupted Verdict = "interrupted" // POST .../interrupt, or the caller went away
	ExecKilled      Verdict = "killed"      // the session ended under it (the interpreter died, DELETE, TTL)
	ExecOutput      Verdict = "output"      // stdout or stderr went past the limit and was cut
	ExecException   Verdict = "exception"   // the cell raised
	ExecOK          Verdict = "ok"
)

// ExecResult is the answer to an exec: 200 whatever its verdict.
type ExecResult struct {
	Type    string  `json:"type,omitempty"` // "result" in a stream
	Verdict Verdict `json:"verdict"`
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
	PeakMemoryBytes uint64            `json:"peak_memory_bytes"`
	BlockedSyscalls []BlockedSyscall  `json:"blocked_syscalls"`
	Network         []NetworkDecision `json:"network"`
	Session         SessionState      `json:"session"`
}

// SessionState is where the session stands after an exec.
type SessionState struct {
	ID            string        `json:"session_id"`
	Alive         bool          `json:"alive"`
	Ended         Verdict       `json:"ended,omitempty"` // the session's verdict, once ended
	ExpiresAt     time.Time     `json:"expires_at"`
	IdleExpiresAt time.Time     `json:"idle_expires_at"`
	Limits        SessionLimits `json:"limits"`
}

// SessionInfo is GET /v1/sessions/{id}, and each of GET /v1/sessions.
type SessionInfo struct {
	SessionID       string        `json:"session_id"`
	Profile         string        `json:"profile"`
	Alive           bool          `json:"alive"`
	Busy            bool          `json:"busy"`
	ExecutionCount  int           `json:"execution_count"`
	Restarts        int           `json:"restarts"`          // POST .../restart that brought a fresh interpreter
	MemoryBytes     uint64        `json:"memory_bytes"`      // now
	PeakMemoryBytes uint64        `json:"peak_memory_bytes"` // the most, so far
	CPUMs           float64       `json:"cpu_ms"`
	CreatedAt       time.Time     `json:"created_at"`
	LastUsedAt      time.Time     `json:"last_used_at"`
	ExpiresAt       time.Time     `json:"expires_at"`
	IdleExpiresAt   time.Time     `json:"idle_expires_at"`
	EndedAt         *time.Time    `json:"ended_at"`
	Verdict         Verdict       `json:"verdict,omitempty"` // once ended
	Why             string        `json:"why,omitempty"`
	Limits          SessionLimits `json:"limits"`
	Pool            PoolUse       `json:"pool"`
}

// The verdicts of a session's end (SessionEnd.Verdict, SessionInfo.Verdict,
// SessionState.Ended).
const (
	SessionClosed      Verdict = "closed"      // DELETE
	SessionIdle        Verdict = "idle"        // no request for its idle timeout
	SessionTTL         Verdict = "ttl"         // its lifetime ran out
	SessionMemory      Verdict = "memory"      // the interpreter was OOM-killed
	SessionTimeout     Verdict = "timeout"     // an exec's KeyboardInterrupt went unanswered
	SessionInterrupted Verdict = "interrupted" // an interrupt's KeyboardInterrupt went unanswered
	SessionKilled      Verdict = "killed"      // the interpreter exited or died otherwise
	SessionFailed      Verdict = "error"       // the driver's channel broke
	SessionShutdown    Verdict = "shutdown"    // the server stopped
)

// SessionEnd is the answer to DELETE /v1/sessions/{id}: the accounting of
// the whole session.
type SessionEnd struct {
	SessionID       string            `json:"session_id"`
	Verdict         Verdict           `json:"verdict"`
	Why             string            `json:"why"`
	ExecutionCount  int               `json:"execution_count"`
	CreatedAt       time.Time         `json:"created_at"`
	EndedAt         time.Time         `json:"ended_at"`
	WallMs          float64           `json:"wall_ms"`
	CPUMs           float64           `json:"cpu_ms"`
	PeakMemoryBytes uint64            `json:"peak_memory_bytes"`
	PidsPeak        uint64            `json:"pids_peak"`
	WorkPeakBytes   uint64            `json:"work_peak_bytes"`
	BlockedSyscalls []BlockedSyscall  `json:"blocked_syscalls"`
	Network         []NetworkDecision `json:"network"`
}

// FileEntry is one entry of GET .../files?path=DIR.
type FileEntry struct {
	Name FSName `json:"name"` // not UTF-8: as FSName writes it

	Type string `json:"type"` // file, dir, symlink, other
	Size int64  `json:"size"`
}

// SessionList is GET /v1/sessions: the caller's sessions.
type SessionList struct {
	Sessions []SessionInfo `json:"sessions"`
}

// Interrupting is the answer to POST /v1/sessions/{id}/interrupt (202):
// the exec is being interrupted; its own answer says how it ended.
type Interrupting struct {
	Status string `json:"status"` // "interrupting"
}

// FileWritten is the answer to PUT .../files/PATH (201). Its fields are
// in the order the server first wrote them (a map's: sorted).
type FileWritten struct {
	Bytes int64  `json:"bytes"`
	Path  string `json:"path"`
}

// FileDeleted is the answer to DELETE .../files/PATH.
type FileDeleted struct {
	Deleted string `json:"deleted"` // the path
}

// FileList is GET .../files?path=DIR.
type FileList struct {
	Path      string      `json:"path"`
	Entries   []FileEntry `json:"entries"`
	Truncated bool        `json:"truncated"`
}
