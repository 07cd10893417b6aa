package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/api"
)

// auditLines decodes the lines of an audit log; a line that is no JSON
// (a torn one) is returned apart.
func auditLines(t *testing.T, path string) (lines []AuditEntry, torn []string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var e AuditEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			torn = append(torn, sc.Text())
			continue
		}
		lines = append(lines, e)
	}
	return lines, torn
}

// The audit log is /dev/full (every write fails with ENOSPC): runs went on
// with 200 and no line, and neither the server's log nor /v1/health said
// anything. Both say it now; and with --audit-required no run starts
// without its line: the request is refused before its code reaches the
// jail.
func TestServeAuditLogFailuresAreSilent(t *testing.T) {
	s := startServer(t, "--pool", "0", "--audit-log", "/dev/full")
	if r := s.run(api.RunRequest{Code: code("print(1)")}); r.Verdict != "ok" {
		t.Fatalf("%+v", r)
	}
	var h api.Health
	s.get("/v1/health", &h)
	if h.Status != "degraded" || !h.Audit.Failing || h.Audit.LostLines != 1 || !strings.Contains(h.Audit.LastError, "no space left") || h.Audit.Log != "/dev/full" {
		t.Errorf("health after a lost audit line: status %q, audit %+v", h.Status, h.Audit)
	}
	if log := s.logString(); !strings.Contains(log, "audit log /dev/full: cannot write") || !strings.Contains(log, "no space left") {
		t.Errorf("the server's log does not say the audit line was lost:\n%s", log)
	}

	r := startServer(t, "--pool", "1", "--audit-log", "/dev/full", "--audit-required")
	mark := fmt.Sprintf("stockade-unaudited-%d", time.Now().UnixNano())
	status, _, body := r.post(api.RunRequest{Argv: []string{"sh", "-c", "sleep 5; : " + mark}})
	if status != 503 || !strings.Contains(string(body), "not started") || !strings.Contains(string(body), "--audit-required") {
		t.Errorf("--audit-required with an audit log that cannot be written: %d %s, want 503 and the reason", status, body)
	}
	if ps := processesWith(mark); len(ps) > 0 {
		t.Errorf("the refused run ran: %v", ps)
	}
	r.get("/v1/health", &h)
	if !h.Audit.Required || h.Audit.LostLines != 1 || h.Running != 0 {
		t.Errorf("health after a refused run: %+v, running %d", h.Audit, h.Running)
	}
}

// A real full filesystem (a 8 KiB tmpfs in the server's own mount
// namespace, half of it taken): lines go in until one is cut short at the
// end of the space, and the runs after it are refused (--audit-required);
// once there is room again, the next line starts on a line of its own
// (not glued to the torn one) and runs are served, each with its start
// and end line.
func TestServeAuditLogFullFilesystem(t *testing.T) {
	bin := needServer(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare (util-linux)")
	}
	dir := t.TempDir()
	sock := filepath.Join(socketDir(t), "s.sock")
	audit := filepath.Join(dir, "audit.log")
	script := `mount -t tmpfs -o size=8k,mode=0700 tmpfs "$1" && head -c 4096 /dev/zero > "$1/filler" && exec "$2" serve --socket "$3" --pool 0 --audit-log "$1/audit.log" --audit-required`
	s := startServerCmd(t, sock, exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", dir, bin, sock))
	// The tmpfs is the server's alone: seen from here through its root.
	inServer := func(p string) string { return fmt.Sprintf("/proc/%d/root%s", s.cmd.Process.Pid, p) }
	served, refused := 0, 0
	for i := 0; i < 40 && refused == 0; i++ {
		switch status, _, body := s.post(api.RunRequest{Code: code(fmt.Sprintf("print(%d)", i))}); status {
		case 200:
			served++
		case 503:
			refused++
			if !strings.Contains(string(body), "no space left") {
				t.Errorf("refused for another reason: %s", body)
			}
		default:
			t.Fatalf("run %d: %d %s", i, status, body)
		}
	}
	if served == 0 || refused == 0 {
		t.Fatalf("%d runs served, %d refused: the audit log never filled its 4 KiB", served, refused)
	}
	lines, torn := auditLines(t, inServer(audit))
	t.Logf("full after %d runs: %d whole lines, torn %d", served, len(lines), len(torn))
	if len(lines) != 2*served {
		t.Errorf("%d runs served with %d whole audit lines, want a start and an end line each", served, len(lines))
	}
	if err := os.Remove(inServer(filepath.Join(dir, "filler"))); err != nil {
		t.Fatal(err)
	}
	if r := s.run(api.RunRequest{Code: code("print('room again')")}); r.Stdout != "room again\n" {
		t.Errorf("after room was made: %+v", r)
	}
	after, torn := auditLines(t, inServer(audit))
	if len(torn) > 1 || len(after) != len(lines)+2 {
		t.Errorf("after room was made: %d whole lines (%d before), torn %q: the next lines must stand on their own", len(after), len(lines), torn)
	}
	last := after[len(after)-2:]
	if last[0].Event != "start" || last[1].Event != "end" || last[0].RunID != last[1].RunID || last[1].AuditOutcome == nil || last[1].Verdict != "ok" {
		t.Errorf("the last run's lines: %+v %+v", last[0], last[1])
	}
	var h api.Health
	s.get("/v1/health", &h)
	if h.Audit.Failing || h.Status != "ok" || h.Audit.LostLines != int64(refused) {
		t.Errorf("health once the audit log is written again: %q %+v", h.Status, h.Audit)
	}
	if log := s.logString(); !strings.Contains(log, "written again") {
		t.Errorf("the server's log does not say the audit log works again:\n%s", log)
	}
}

// SIGHUP killed the server at once (Go's default for it): no log line,
// the request in flight got a closed connection, and its jail's leftovers
// and the socket stayed until the next start. It reopens the audit log,
// as logrotate's postrotate expects: the run in flight finishes and
// answers, its line lands in the new file at the path, the old one keeps
// what came before, and SIGTERM still leaves nothing behind (stop checks).
func TestServeSIGHUPReopensAuditLog(t *testing.T) {
	audit := filepath.Join(t.TempDir(), "audit.log")
	s := startServer(t, "--pool", "1", "--audit-log", audit)
	s.run(api.RunRequest{Code: code("print('before')")})
	answer := make(chan string, 1)
	go func() {
		b, _ := json.Marshal(api.RunRequest{Code: code("import time; time.sleep(1.5); print('finished')")})
		resp, err := s.hc.Post("http://stockade/v1/run", "application/json", bytes.NewReader(b))
		if err != nil {
			answer <- err.Error()
			return
		}
		defer resp.Body.Close()
		var r api.RunResponse
		json.NewDecoder(resp.Body).Decode(&r)
		answer <- fmt.Sprintf("%d %s", resp.StatusCode, r.Stdout)
	}()
	eventually(t, "the run started", func() bool {
		var h api.Health
		s.get("/v1/health", &h)
		return h.Running == 1
	})
	if err := os.Rename(audit, audit+".1"); err != nil {
		t.Fatal(err)
	}
	s.cmd.Process.Signal(syscall.SIGHUP)
	if got := <-answer; got != "200 finished\n" {
		t.Errorf("the run in flight at SIGHUP: %q, want 200 and its output", got)
	}
	if !strings.Contains(s.logString(), "SIGHUP: audit log reopened at "+audit) {
		t.Errorf("no word of the SIGHUP in the log:\n%s", s.logString())
	}
	old, _ := auditLines(t, audit+".1")
	now, _ := auditLines(t, audit)
	if len(old) != 1 || len(now) != 1 || now[0].AuditOutcome == nil || now[0].Verdict != "ok" {
		t.Errorf("rotated file: %d lines, want the first run's; new file: %d lines, want the run in flight's", len(old), len(now))
	}
	s.run(api.RunRequest{Code: code("print('after')")})
	if now, _ = auditLines(t, audit); len(now) != 2 {
		t.Errorf("the new file has %d lines after one more run, want 2", len(now))
	}
}
