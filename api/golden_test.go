package api

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"testing"
	"time"
)

// The golden files in testdata are each route's JSON as the server wrote
// it before these types moved here (commit 968ed72, from server's own
// types): a value marshalled now must give the same bytes, so the wire
// stays compatible, and the golden must decode back into the same value,
// so a Go client reads what the server writes.

// goldenValues are fully populated values, one for each request and
// answer of each route: every field set, so that a field renamed,
// dropped or retagged changes the bytes.
func goldenValues() map[string]any {
	s := func(v string) *string { return &v }
	i64 := func(v int64) *int64 { return &v }
	u64 := func(v uint64) *uint64 { return &v }
	f64 := func(v float64) *float64 { return &v }
	sig := 9
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 123456789, time.UTC)
	t1 := t0.Add(90 * time.Minute)
	t2 := t0.Add(10 * time.Minute)
	ended := t0.Add(5 * time.Minute)
	limits := SessionLimits{TimeoutMs: 30000, CPUTimeMs: 20000, OutputBytes: 1 << 20, MemoryBytes: 256 << 20, SwapBytes: 0, CPUs: 1.5, Pids: 64, WorkBytes: 64 << 20, IdleTimeoutMs: 600000, TTLMs: 3600000, Seccomp: "default"}
	state := SessionState{ID: "s-1", Alive: true, Ended: SessionMemory, ExpiresAt: t1, IdleExpiresAt: t2, Limits: limits}
	pool := PoolUse{Hit: false, WaitedMs: 12.5, Reason: "none ready"}
	bs := []BlockedSyscall{{Name: "ptrace", Count: 2, Example: "ptrace(PTRACE_ATTACH)"}}
	net := []NetworkDecision{{Host: "pypi.org", Port: 443, Address: "151.101.0.223", Via: "CONNECT", Allowed: true, Reason: "r", Rule: "pypi.org", Private: "10.0.0.0/8", Count: 3, BytesUp: 100, BytesDown: 2000, Error: "e", Cut: "c"}}
	rich := []RichResult{{Data: map[string]json.RawMessage{"text/plain": json.RawMessage(`"42"`), "image/png": json.RawMessage(`"iVBORw0K"`), "application/json": json.RawMessage(`{"a":[1,2]}`)}, IsMainResult: true, Truncated: true}}
	res := &Result{Verdict: VerdictOutput, ExitCode: 137, Signal: &sig, WallMs: 1.5, UserMs: 2.5, SysMs: 3.5, CPUMs: 6, PeakMemoryBytes: 1 << 24, PidsPeak: 7,
		WorkPeakBytes: 4096, WorkPeakInodes: 3, CopyBackMs: 1.25, CopyBack: &CopyBack{Ms: 1.25, Files: 2, Bytes: 10, Deleted: 1, Conflicts: []string{"a: b"}, Skipped: []string{"c: d"}, Stopped: s("limit")},
		Stdout: "out <&> \u2028 é", Stderr: "err\n", StdoutTruncated: true, StderrTruncated: true, StdoutBytes: 100, StderrBytes: 4,
		Limits: RunLimits{TimeoutMs: 30000, CPUTimeMs: i64(20000), MemoryBytes: i64(256 << 20), SwapBytes: i64(0), CPUs: f64(1), Pids: i64(64), OpenFiles: 256, FileSizeBytes: u64(1 << 30), OutputBytes: 1 << 20, TmpfsBytes: 64 << 20, WorkBytes: i64(64 << 20)},
		Cgroup: "v2", Seccomp: "default", BlockedSyscalls: bs, Degraded: []string{"no swap"}, Network: net, Error: s("boom"), StockadeVersion: "1.2.3",
		Phases: []Phase{{Name: "clone", StartUs: 1200}}}
	return map[string]any{
		"run_request":       &RunRequest{Code: s("print(1)"), Argv: []string{"python3", "-c", "1"}, Stdin: "in", Files: map[string]string{"a.txt": "eA==", "b": "eQ=="}, Profile: "default", Limits: Limits{"memory": "256M", "timeout": "2s", "pids": json.Number("16")}},
		"run_response":      &RunResponse{Result: res, Files: FileMap{"out.txt": "eA==", "bad\xff": "eQ=="}, FilesTruncated: true, FilesSkipped: SkippedList{"big: too large", "x\xfe: why"}, Images: []Image{{Type: "png", Data: "iVBORw0K"}}, Results: rich, ResultsTruncated: true, Pool: pool},
		"run_stream_result": &RunResponse{Type: "result", Result: res, Files: FileMap{}, FilesSkipped: SkippedList{}, Images: []Image{}, Results: []RichResult{}, Pool: PoolUse{Hit: true, WaitedMs: 0.25}},
		"run_stream_stdout": &StreamLine{Type: "stdout", Data: "hello <b> & \u00e9\n"},
		"error":             &Error{Msg: "limits.memory: 9G is above the profile's 1G"},
		"session_request":   &SessionRequest{Profile: "default", Limits: Limits{"memory": "128M"}, IdleTimeout: "10m", TTL: "1h", Files: map[string]string{"d/a.py": "eA=="}, Env: map[string]string{"TOKEN": "x"}},
		"session_created":   &SessionCreated{SessionID: "s-1", Profile: "default", Limits: limits, CreatedAt: t0, ExpiresAt: t1, IdleExpiresAt: t2, Pool: pool},
		"exec_request":      &ExecRequest{Code: s("x = 1\nx"), Stdin: "in", Timeout: "5s", Files: map[string]string{"a": "eA=="}, FigureFormats: []string{"png", "svg"}, Env: map[string]string{"A": "b"}},
		"exec_result": &ExecResult{Verdict: ExecException, State: "kept", Why: "the cell raised", Stdout: "o", Stderr: "e", StdoutTruncated: true, StderrTruncated: true, StdoutBytes: 1, StderrBytes: 1,
			Result: s("1"), ResultTruncated: true, Error: &ExecError{Name: "ValueError", Value: "bad", Traceback: "Traceback...", Truncated: true}, Images: []Image{{Type: "png", Data: "iVBORw0K"}}, ImagesTruncated: true,
			Results: rich, ResultsTruncated: true, FilesChanged: FSNames{"a", "d/\xff"}, FilesChangedTruncated: true, ExecutionCount: 3, WallMs: 10.5, CPUMs: 9.25, PeakMemoryBytes: 1 << 25, BlockedSyscalls: bs, Network: net, Session: state},
		"exec_stream_result": &ExecResult{Type: "result", Verdict: ExecOK, State: "kept", FilesChanged: FSNames{}, BlockedSyscalls: []BlockedSyscall{}, Network: []NetworkDecision{}, Session: SessionState{ID: "s-1", Alive: true, ExpiresAt: t1, IdleExpiresAt: t2, Limits: limits}},
		"ttl_request":        &TTLRequest{TTL: "30m"},
		"restart_result":     &RestartResult{SessionID: "s-1", Restarted: true, State: "fresh", Why: "w", Python: "3.11.2", Restarts: 2, WallMs: 80.5, Session: state},
		"session_info":       &SessionInfo{SessionID: "s-1", Profile: "default", Alive: false, Busy: true, ExecutionCount: 4, Restarts: 1, MemoryBytes: 1000, PeakMemoryBytes: 2000, CPUMs: 3.5, CreatedAt: t0, LastUsedAt: t2, ExpiresAt: t1, IdleExpiresAt: t2, EndedAt: &ended, Verdict: SessionTTL, Why: "ttl ran out", Limits: limits, Pool: pool},
		"session_list":       &SessionList{Sessions: []SessionInfo{{SessionID: "s-1", Profile: "default", Alive: true, CreatedAt: t0, LastUsedAt: t0, ExpiresAt: t1, IdleExpiresAt: t2, Limits: limits, Pool: pool}}},
		"session_end":        &SessionEnd{SessionID: "s-1", Verdict: SessionClosed, Why: "DELETE", ExecutionCount: 4, CreatedAt: t0, EndedAt: ended, WallMs: 300000, CPUMs: 12, PeakMemoryBytes: 3000, PidsPeak: 5, WorkPeakBytes: 4096, BlockedSyscalls: bs, Network: net},
		"file_list":          &FileList{Path: "d", Entries: []FileEntry{{Name: "a.py", Type: "file", Size: 12}, {Name: "\xfe", Type: "dir", Size: 0}}, Truncated: true},
		"file_written":       &FileWritten{Path: "d/a.py", Bytes: 12},
		"file_deleted":       &FileDeleted{Deleted: "d/a.py"},
		"interrupting":       &Interrupting{Status: "interrupting"},
		"health": &Health{Status: "degraded", Version: "1.2.3", Profiles: []string{"default", "net"}, Pool: map[string]PoolStats{"default": {Target: 2, Ready: 1, Preparing: 1, Hits: 5, Misses: 2, DiedWaiting: 1, Failed: 1, Evicted: 1}},
			Running: 1, Queued: 2, Budget: map[string]int64{"memory_used": 1, "memory_max": 2, "pids_used": 3, "pids_max": 4, "body_bytes_used": 5, "body_bytes_max": 6},
			Audit: AuditHealth{Log: "/var/log/a", Required: true, Failing: true, LostLines: 2, LastError: "disk full", LastErrorTime: &t0}, Host: []string{"cgroup v2"}},
	}
}

// marshalWire encodes v as the server does: no HTML escaping, a newline.
func marshalWire(t *testing.T, v any) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestGoldenWire(t *testing.T) {
	values := goldenValues()
	files, _ := filepath.Glob("testdata/*.json")
	if len(files) != len(values) {
		t.Errorf("%d golden files, %d values: each route's JSON needs both", len(files), len(values))
	}
	for name, v := range values {
		t.Run(name, func(t *testing.T) {
			want, err := os.ReadFile(filepath.Join("testdata", name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			if got := marshalWire(t, v); !bytes.Equal(got, want) {
				t.Fatalf("marshalled:\n%s\ngolden:\n%s", got, want)
			}
			// Decoded, the golden gives the same value: marshalled again it
			// is the same bytes, but for the names that are not UTF-8,
			// which a Go reader sees as U+FFFD.
			back := reflect.New(reflect.TypeOf(v).Elem())
			dec := json.NewDecoder(bytes.NewReader(want))
			dec.UseNumber()
			dec.DisallowUnknownFields()
			if err := dec.Decode(back.Interface()); err != nil {
				t.Fatalf("decode the golden: %v", err)
			}
			seen := surrogate.ReplaceAll(want, []byte("\uFFFD"))
			if got := marshalWire(t, back.Interface()); !bytes.Equal(got, seen) {
				t.Fatalf("decoded and marshalled again:\n%s\ngolden, as Go reads it:\n%s", got, seen)
			}
		})
	}
}

var surrogate = regexp.MustCompile(`\\udc[0-9a-f]{2}`)
