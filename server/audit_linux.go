package server

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"os"
	"time"

	"github.com/stockade/stockade/jail"
)

// writeAudit writes e, and logs a failure, or the log working again.
func (s *Server) writeAudit(e AuditEntry) error {
	a := s.cfg.Audit
	if a == nil {
		return nil // no log asked for (New refuses --audit-required without one)
	}
	changed, err := a.write(marshal(e))
	switch {
	case err != nil && changed:
		more := "runs go on without their lines (--audit-required would refuse them)"
		if s.cfg.AuditRequired {
			more = "runs are refused until it can be written (--audit-required)"
		}
		s.logf("audit log %s: cannot write run %s's %s line: %v; %s", a.where(), e.RunID, e.Event, err, more)
	case err == nil && changed:
		h := a.health(s.cfg.AuditRequired)
		s.logf("audit log %s: written again, after %d lines lost in all", a.where(), h.LostLines)
	}
	return err
}

// ReopenAuditLog is the server's answer to SIGHUP: the audit log file is
// opened again at its path, for logrotate.
func (s *Server) ReopenAuditLog() {
	path, err := s.cfg.Audit.Reopen()
	switch {
	case err != nil:
		s.logf("SIGHUP: reopen the audit log: %v; still writing to the file it had open", err)
	case path == "":
		s.logf("SIGHUP: the audit log is not a file (--audit-log - or none): nothing to reopen")
	default:
		s.logf("SIGHUP: audit log reopened at %s", path)
	}
}

// runID names a run in its audit lines: the server's start, its pid and
// the run's number.
func (s *Server) runID() string {
	return fmt.Sprintf("%d-%d-%d", s.started.Unix(), os.Getpid(), s.runSeq.Add(1))
}

// auditEntry is the part of a run's audit lines known before it starts.
func auditEntry(event, id string, caller peer, req *RunRequest, spec jail.Spec, use PoolUse) AuditEntry {
	e := AuditEntry{Event: event, RunID: id, Time: time.Now().UTC(), UID: caller.uid, PID: caller.pid, Profile: req.Profile,
		Files: len(req.Files), Limits: limitsOf(spec), Pool: use}
	e.Tenant, e.ClusterRunID = caller.tenant, caller.clusterRun
	if req.Code != nil {
		h := sha256.New()
		hashString(h, *req.Code)
		e.CodeSHA256, e.CodeBytes = hex.EncodeToString(h.Sum(nil)), len(*req.Code)
	}
	if len(req.Argv) > 0 {
		// The hash is of the arguments NUL-terminated, as execve sees them.
		h := sha256.New()
		for _, a := range req.Argv {
			hashString(h, a)
			h.Write([]byte{0})
			e.ArgvBytes += len(a) + 1
		}
		e.ArgvSHA256, e.ArgvCount = hex.EncodeToString(h.Sum(nil)), len(req.Argv)
	}
	return e
}

// hashString hashes s through a small buffer: []byte(s) would copy all of
// a code string that can be --max-body long.
func hashString(h hash.Hash, s string) {
	var buf [32 << 10]byte
	for len(s) > 0 {
		n := copy(buf[:], s)
		h.Write(buf[:n])
		s = s[n:]
	}
}

// auditStart writes a run's start line when --audit-required asks for one,
// before its code reaches the jail; the refusal to answer when it cannot.
func (s *Server) auditStart(id string, caller peer, req *RunRequest, spec jail.Spec, use PoolUse) *apiError {
	if !s.cfg.AuditRequired {
		return nil
	}
	if err := s.writeAudit(auditEntry("start", id, caller, req, spec, use)); err != nil {
		return &apiError{Status: 503, Msg: fmt.Sprintf("the run was not started: its audit line could not be written (--audit-required): %v", err)}
	}
	return nil
}

// auditEnd writes a run's end line, with its outcome.
func (s *Server) auditEnd(id string, caller peer, req *RunRequest, spec jail.Spec, use PoolUse, res *jail.Result) {
	e := auditEntry("end", id, caller, req, spec, use)
	e.AuditOutcome = &AuditOutcome{Verdict: res.Verdict, ExitCode: res.ExitCode, WallMs: res.WallMs, Blocked: res.BlockedSyscalls, Error: res.Error}
	_ = s.writeAudit(e)
}
