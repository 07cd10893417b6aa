package server

import (
	"io"
	"sync"
	"time"

	"github.com/stockade/stockade/jail"
)

// auditLog writes one JSON line per run, so that an operator can answer
// "what ran here last night": who asked, a hash of what ran, under which
// limits, and how it ended.
type auditLog struct {
	mu sync.Mutex
	w  io.Writer
}

// AuditEntry is one line of the audit log.
type AuditEntry struct {
	Time       time.Time `json:"time"`
	UID        uint32    `json:"uid"`
	PID        int32     `json:"pid"`
	Profile    string    `json:"profile"`
	CodeSHA256 string    `json:"code_sha256,omitempty"`
	// argv is logged by its hash and size only: the caller chooses it,
	// up to --max-body, and one log line must not carry megabytes.
	ArgvSHA256 string                `json:"argv_sha256,omitempty"`
	ArgvCount  int                   `json:"argv_count,omitempty"`
	ArgvBytes  int                   `json:"argv_bytes,omitempty"`
	CodeBytes  int                   `json:"code_bytes,omitempty"`
	Files      int                   `json:"files_in"`
	Limits     AuditLimits           `json:"limits"`
	Verdict    jail.Verdict          `json:"verdict"`
	ExitCode   int                   `json:"exit_code"`
	WallMs     float64               `json:"wall_ms"`
	Pool       PoolUse               `json:"pool"`
	Blocked    []jail.BlockedSyscall `json:"blocked_syscalls"`
	Error      *string               `json:"error"`
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
	return AuditLimits{TimeoutMs: s.Timeout.Milliseconds(), CPUTimeMs: s.Cgroup.CPUTime.Milliseconds(),
		MemoryBytes: s.Cgroup.MemoryMax, CPUs: s.Cgroup.CPUs, Pids: s.Cgroup.PidsMax,
		OutputLimit: s.OutputLimit, Seccomp: s.Seccomp}
}

func (a *auditLog) write(e AuditEntry) {
	if a.w == nil {
		return
	}
	b := marshal(e)
	a.mu.Lock()
	defer a.mu.Unlock()
	_, _ = a.w.Write(b)
}
