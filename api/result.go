package api

// Verdict says how a run, an exec or a session ended: one vocabulary, in
// which a word means the same wherever it appears ("memory": the kernel
// OOM-killed a process; "error": stockade failed, not the program). Each
// kind of end has its own constants: Verdict* a run's (Result), Exec* an
// exec's (ExecResult), Session* a session's (SessionEnd, SessionInfo),
// and an audit line carries any of them.
//
// The order of a run's constants is the order of precedence when more
// than one applies: a fork bomb that also ran out of time is reported as
// "pids", because that is what the user has to fix; the jail's
// ending.verdict (verdict.go) is the one place that order is applied.
type Verdict string

const (
	VerdictError     Verdict = "error"     // the jail could not be set up
	VerdictCancelled Verdict = "cancelled" // the caller cancelled the run (SIGINT, SIGTERM or SIGHUP to stockade)
	VerdictMemory    Verdict = "memory"    // the kernel OOM-killed something in the jail
	VerdictPids      Verdict = "pids"      // fork or clone failed at the pids limit
	VerdictDisk      Verdict = "disk"      // /work was full (--work-size)
	VerdictCPU       Verdict = "cpu"       // the CPU-time limit ended the run
	VerdictTimeout   Verdict = "timeout"   // the wall-clock limit ended the run
	VerdictSeccomp   Verdict = "seccomp"   // a blocked system call killed the payload
	VerdictSignal    Verdict = "signal"    // the payload died of a signal
	VerdictOutput    Verdict = "output"    // output went past the limit and was cut
	VerdictExit      Verdict = "exit"      // the payload exited non-zero
	VerdictOK        Verdict = "ok"        // exit 0, nothing cut
)

// Result is what a run produced. Its JSON form is the documented,
// stable `--json` output: new fields may be added, none renamed.
type Result struct {
	Verdict  Verdict `json:"verdict"`
	ExitCode int     `json:"exit_code"`
	Signal   *int    `json:"signal"`

	WallMs float64 `json:"wall_ms"`
	UserMs float64 `json:"user_ms"`
	SysMs  float64 `json:"sys_ms"`
	CPUMs  float64 `json:"cpu_ms"`

	PeakMemoryBytes uint64 `json:"peak_memory_bytes"`
	PidsPeak        uint64 `json:"pids_peak,omitempty"`

	// WorkPeakBytes and WorkPeakInodes are the most /work's writable layer
	// held at once (a fresh /work, or the changes over a --workdir: bytes
	// written and not deleted; files, directories, links and whiteouts),
	// sampled every 50 ms and at the end; 0 with --no-workdir.
	WorkPeakBytes  uint64 `json:"work_peak_bytes"`
	WorkPeakInodes uint64 `json:"work_peak_inodes"`
	// CopyBackMs is how long stockade took, after the run, to copy a
	// --workdir's changes back; CopyBack.Ms, kept for callers that read
	// it here.
	CopyBackMs float64 `json:"copy_back_ms,omitempty"`
	// CopyBack is what copying a --workdir's changes back did; nil
	// without --workdir.
	CopyBack *CopyBack `json:"copy_back"`

	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdout_truncated"`
	StderrTruncated bool   `json:"stderr_truncated"`
	StdoutBytes     int64  `json:"stdout_bytes"`
	StderrBytes     int64  `json:"stderr_bytes"`

	// Limits are the limits the run ran under, as Run applied them.
	Limits RunLimits `json:"limits"`

	Cgroup          string           `json:"cgroup"`
	Seccomp         string           `json:"seccomp"`
	BlockedSyscalls []BlockedSyscall `json:"blocked_syscalls"`
	Degraded        []string         `json:"degraded"`
	// Network lists every network attempt of the run, allowed or not:
	// through the proxy, and direct ones the jail's namespace stopped.
	Network []NetworkDecision `json:"network"`

	Error           *string `json:"error"`
	StockadeVersion string  `json:"stockade_version"`

	// Phases is when each step of the run began, stockade's and init's,
	// in order, when Host.TracePhases asked (docs/performance.md); a
	// Prepared jail's are complete once Close returns.
	Phases []Phase `json:"phases,omitempty"`
}

// CopyBack is what copy-back did with a --workdir's changes after the
// run: all of them or, when it stopped, none (Stopped says why).
type CopyBack struct {
	Ms      float64 `json:"ms"`      // how long it took, its clean-up included
	Files   int     `json:"files"`   // entries written into DIR: files, directories, symlinks, hard links
	Bytes   int64   `json:"bytes"`   // data written into them
	Deleted int     `json:"deleted"` // entries of DIR removed as the jail removed them
	// Conflicts are changes of the jail's left out because the host
	// changed the same place during the run (the host's version stays), or
	// a mount point is there: "path: why".
	Conflicts []string `json:"conflicts"`
	// Skipped are entries of the jail's never copied back: symlinks that
	// lead out of DIR, fifos, sockets and devices.
	Skipped []string `json:"skipped"`
	// Stopped says why nothing was applied (a limit, the deadline, a
	// failure; DIR is then as it was, and the run's error says so too);
	// null when copy-back completed. Files, Bytes and Deleted are then 0.
	Stopped *string `json:"stopped"`
}

// BlockedSyscall is one distinct system call the filter refused.
type BlockedSyscall struct {
	Name    string `json:"name"`
	Count   int    `json:"count"`
	Example string `json:"example"`
}

// RunLimits are the effective limits of a run, read from the jail.Spec
// that jail.Run enforced (jail.LimitsOf), so that a report never recomputes them. A null (nil)
// limit was not applied: no CPU-time or file-size limit was asked for, or
// there is no cgroup (--no-cgroup) to hold memory, CPU, CPU time and pids.
//
// Each field's spec tag names the Spec field it reports, and its null tag
// when it is null: "nocgroup" (Host.NoCgroup), "zero" (the Spec field is
// 0, no limit), "noworkdir" (no writable /work). A duration is reported in
// milliseconds, rounded up. A new limit is its field here with those tags: LimitsOf
// needs no line of its own (TestLimitsReportTheirSpecFields).
type RunLimits struct {
	TimeoutMs     int64    `json:"timeout_ms" spec:"Timeout"`
	CPUTimeMs     *int64   `json:"cpu_time_ms" spec:"Cgroup.CPUTime" null:"zero,nocgroup"`
	MemoryBytes   *int64   `json:"memory_bytes" spec:"Cgroup.MemoryMax" null:"nocgroup"`
	SwapBytes     *int64   `json:"swap_bytes" spec:"Cgroup.SwapMax" null:"nocgroup"`
	CPUs          *float64 `json:"cpus" spec:"Cgroup.CPUs" null:"nocgroup"`
	Pids          *int64   `json:"pids" spec:"Cgroup.PidsMax" null:"nocgroup"`
	OpenFiles     uint64   `json:"open_files" spec:"Rlimits.OpenFiles"`
	FileSizeBytes *uint64  `json:"file_size_bytes" spec:"Rlimits.FileSize" null:"zero"`
	OutputBytes   int64    `json:"output_bytes" spec:"OutputLimit"`
	TmpfsBytes    int64    `json:"tmpfs_bytes" spec:"TmpfsSize"`
	WorkBytes     *int64   `json:"work_bytes" spec:"WorkSize" null:"noworkdir"` // what /work may hold; null for --no-workdir
}

// Phase is when one step of a run began (Result.Phases).
type Phase struct {
	Name string `json:"name"`
	// StartUs is microseconds since stockade's process started
	// (on Linux, from /proc/self/stat: see processStart).
	StartUs int64 `json:"start_us"`
}

// NetworkDecision is one kind of network attempt of a run and what became of it:
// an entry of the result's "network" list. Identical attempts (same host,
// port, address, way and outcome) are one entry with a count, so a loop
// cannot grow the result without bound.
type NetworkDecision struct {
	Host      string `json:"host"`
	Port      uint16 `json:"port"`
	Address   string `json:"address,omitempty"` // the address dialled (or refused)
	Via       string `json:"via"`               // CONNECT, GET, HEAD; connect, sendto, sendmsg, sendmmsg, dns (direct)
	Allowed   bool   `json:"allowed"`
	Reason    string `json:"reason,omitempty"`  // why refused, or why a tunnel was cut
	Rule      string `json:"rule,omitempty"`    // the allowlist entry that allowed it
	Private   string `json:"private,omitempty"` // the --allow-private range that opened its address
	Count     int    `json:"count"`             // how many such attempts
	BytesUp   int64  `json:"bytes_up"`          // from the jail
	BytesDown int64  `json:"bytes_down"`        // to the jail
	Error     string `json:"error,omitempty"`   // allowed, but the upstream failed
	Cut       string `json:"cut,omitempty"`     // a limit ended the tunnel
}
