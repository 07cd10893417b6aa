package server

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/internal/auditline"
	"github.com/stockade/stockade/jail"
)

// AuditLog is where the server writes one JSON line per run, so that an
// operator can answer "what ran here last night": who asked, a hash of
// what ran, under which limits, and how it ended. A line that cannot be
// written (a full disk, /dev/full, a closed stderr) is counted, said in the
// server's log and in /v1/health, and with --audit-required no run starts
// without its line.
type AuditLog struct {
	mu   sync.Mutex
	path string   // the file, reopened on SIGHUP; "" for a writer given
	f    *os.File // the open file, when path is set
	w    io.Writer
	// torn: the last write was cut short mid-line (a filesystem filling
	// up), so the next line begins with a newline: one torn line, never
	// two lines run together.
	torn bool

	lost      int64     // lines not written, since the start
	lastErr   error     // of the last write that failed
	lastErrAt time.Time // when
	failing   bool      // the last write failed
}

// OpenAuditLog opens path for appending (created 0600): a file that
// Reopen can open again once logrotate has moved it.
func OpenAuditLog(path string) (*AuditLog, error) {
	f, err := openAuditFile(path)
	if err != nil {
		return nil, err
	}
	return &AuditLog{path: path, f: f, w: f}, nil
}

// NewAuditWriter writes the audit lines to w (stderr), which Reopen leaves.
func NewAuditWriter(w io.Writer) *AuditLog { return &AuditLog{w: w} }

func openAuditFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	return f, nil
}

// Reopen opens the audit log's path again, as logrotate expects of a
// SIGHUP after it moved the file: the lines to come go to a new file at
// the path. If the path cannot be opened, the old file stays in use.
func (a *AuditLog) Reopen() (string, error) {
	if a == nil || a.path == "" {
		return "", nil
	}
	f, err := openAuditFile(a.path)
	if err != nil {
		return a.path, err
	}
	a.mu.Lock()
	old := a.f
	a.torn = a.torn && sameFile(old, f)
	a.f, a.w = f, f
	a.mu.Unlock()
	// No write is under way: writes hold mu.
	old.Close()
	return a.path, nil
}

func sameFile(a, b *os.File) bool {
	ai, err1 := a.Stat()
	bi, err2 := b.Stat()
	return err1 == nil && err2 == nil && os.SameFile(ai, bi)
}

// Close closes the file the log opened.
func (a *AuditLog) Close() error {
	if a == nil || a.f == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.f.Close()
}

// where names the log for messages.
func (a *AuditLog) where() string {
	if a.path != "" {
		return a.path
	}
	return "stderr"
}

// write appends one line (ending in a newline). It says whether this
// write failed where the last had not (or the reverse), so that the
// server logs a change, not every line of a long outage.
func (a *AuditLog) write(line []byte) (changed bool, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.torn, err = auditline.Write(a.w, line, a.torn)
	changed = (err != nil) != a.failing
	a.failing = err != nil
	if err != nil {
		a.lost++
		a.lastErr, a.lastErrAt = err, time.Now()
	}
	return changed, err
}

func (a *AuditLog) health(required bool) api.AuditHealth {
	if a == nil {
		return api.AuditHealth{Required: required}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	h := api.AuditHealth{Log: a.where(), Required: required, Failing: a.failing, LostLines: a.lost}
	if a.lastErr != nil {
		at := a.lastErrAt.UTC()
		h.LastError, h.LastErrorTime = a.lastErr.Error(), &at
	}
	return h
}

// AuditEntry is one line of the audit log. Every run has an "end" line,
// written after it; with --audit-required it also has a "start" line,
// written before its code reaches the jail (a run whose start line cannot
// be written does not start), without the outcome.
//
// A session writes "session_start" and "session_end" lines (and a
// "session_restart" line before each POST .../restart), and for each
// exec an "exec_end" line (and with --audit-required an "exec_start"
// line before the cell reaches the interpreter): their RunID is the
// session's id and, for an exec, its execution count ("<id>/3").
type AuditEntry struct {
	Event     string    `json:"event"`                // "start" or "end"; a session's, above
	RunID     string    `json:"run_id"`               // the same in a run's two lines
	SessionID string    `json:"session_id,omitempty"` // a session's lines
	Time      time.Time `json:"time"`
	UID       uint32    `json:"uid"`
	PID       int32     `json:"pid"`
	// A run a cluster node took from the queue: the tenant the gateway
	// named, and the cluster's id of the run (the gateway's answer names
	// it; RunID stays this server's own).
	Tenant       string `json:"tenant,omitempty"`
	ClusterRunID string `json:"cluster_run_id,omitempty"`
	Profile      string `json:"profile"`
	// argv is logged by its hash and size only: the caller chooses it,
	// up to --max-body, and one log line must not carry megabytes.
	CodeSHA256 string      `json:"code_sha256,omitempty"`
	ArgvSHA256 string      `json:"argv_sha256,omitempty"`
	ArgvCount  int         `json:"argv_count,omitempty"`
	ArgvBytes  int         `json:"argv_bytes,omitempty"`
	CodeBytes  int         `json:"code_bytes,omitempty"`
	Files      int         `json:"files_in"`
	Limits     AuditLimits `json:"limits"`
	Pool       api.PoolUse `json:"pool"`
	*AuditOutcome
}

// AuditOutcome is how a run ended: the "end" line's alone.
type AuditOutcome struct {
	Verdict  api.Verdict           `json:"verdict"`
	State    string                `json:"state,omitempty"` // an exec's: kept or lost
	ExitCode int                   `json:"exit_code"`
	WallMs   float64               `json:"wall_ms"`
	Blocked  []jail.BlockedSyscall `json:"blocked_syscalls"`
	Error    *string               `json:"error"`
}

// AuditLimits are the effective limits of a run.
type AuditLimits struct {
	TimeoutMs   int64   `json:"timeout_ms"`
	CPUTimeMs   int64   `json:"cpu_time_ms"`
	MemoryBytes int64   `json:"memory_bytes"`
	CPUs        float64 `json:"cpus"`
	Pids        int64   `json:"pids"`
	OutputLimit int64   `json:"output_limit"`
	Seccomp     string  `json:"seccomp"`
}

func limitsOf(s jail.Spec) AuditLimits {
	return AuditLimits{TimeoutMs: jail.LimitMs(s.Timeout), CPUTimeMs: jail.LimitMs(s.Cgroup.CPUTime),
		MemoryBytes: s.Cgroup.MemoryMax, CPUs: s.Cgroup.CPUs, Pids: s.Cgroup.PidsMax,
		OutputLimit: s.OutputLimit, Seccomp: s.Seccomp}
}
