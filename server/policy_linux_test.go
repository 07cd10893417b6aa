package server

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/profiles"
)

// validateMsg is what Profile.Validate says of value for field, as the CLI
// prints it after the flag's name and a profile file after its line.
func validateMsg(t *testing.T, f profiles.Field, value string) string {
	t.Helper()
	p := profiles.Defaults()
	if err := p.Set(f, value, profiles.Origin{File: "--x"}); err != nil {
		t.Fatal(err)
	}
	var pe *profiles.Error
	if err := p.Validate(); !errors.As(err, &pe) {
		t.Fatalf("%s = %s: Validate says %v", f, value, err)
	}
	return pe.Msg
}

// TestServerRefusesBadLimitsAs422: a request's limits are one more profile
// layer, checked by the profile's own Validate. A value the CLI refuses
// (exit 125 naming the flag) used to reach the jail and fail there, a 500
// with the kernel's words ("jail init ended without a report",
// "resource temporarily unavailable"): it must be a 422 naming the field,
// with the message a flag or a file gets.
func TestServerRefusesBadLimitsAs422(t *testing.T) {
	s := startServer(t, "--pool", "0")
	for _, c := range []struct {
		body  string
		field profiles.Field
		value string
	}{
		{`{"code": "1", "limits": {"memory": "1"}}`, profiles.FieldMemory, "1"},
		{`{"code": "1", "limits": {"pids": 1}}`, profiles.FieldPids, "1"},
		{`{"code": "1", "limits": {"cpus": 0.0001}}`, profiles.FieldCPUs, "0.0001"},
		{`{"code": "1", "limits": {"cpus": -1}}`, profiles.FieldCPUs, "-1"},
		{`{"code": "1", "limits": {"open_files": 1}}`, profiles.FieldOpenFiles, "1"},
	} {
		status, _, body := s.post(c.body)
		var e struct{ Error string }
		_ = json.Unmarshal(body, &e)
		want := validateMsg(t, c.field, c.value)
		if status != 422 || !strings.Contains(e.Error, string(c.field)+": "+want) {
			t.Errorf("%s: %d %s, want 422 saying %q", c.body, status, body, string(c.field)+": "+want)
		}
	}
}

// TestServerRefusesLooserLimitsNamingTheCeiling: the profile is the
// server's ceiling; a request may only tighten it.
func TestServerRefusesLooserLimitsNamingTheCeiling(t *testing.T) {
	s := startServer(t, "--pool", "0")
	for _, c := range []struct{ body, want string }{
		{`{"code": "1", "limits": {"memory": "1G"}}`, "limits.memory: 1G is above the ceiling of 512M"},
		{`{"code": "1", "limits": {"timeout": "1h"}}`, "limits.timeout: 1h0m0s is above the ceiling of 10s"},
		{`{"code": "1", "limits": {"pids": 100000}}`, "limits.pids: 100000 is above the ceiling of 128"},
		{`{"code": "1", "limits": {"file_size": 0}}`, "limits.file_size: 0 (no limit) is above the ceiling of 64M"},
	} {
		status, _, body := s.post(c.body)
		if status != 422 || !strings.Contains(string(body), c.want) {
			t.Errorf("%s: %d %s, want 422 saying %q", c.body, status, body, c.want)
		}
	}
}

// TestPooledRunResultSaysEnforcedTimeout: a pooled jail serving a request
// for "timeout": "1s" was stopped at 1 s, but its result said the
// profile's 10 s (limits.timeout_ms 10000).
func TestPooledRunResultSaysEnforcedTimeout(t *testing.T) {
	s := startServer(t, "--pool", "1")
	status, _, body := s.post(`{"code": "import time; time.sleep(30)", "limits": {"timeout": "1s"}}`)
	var r api.RunResponse
	if status != 200 || json.Unmarshal(body, &r) != nil || r.Result == nil {
		t.Fatalf("%d %s", status, body)
	}
	if !r.Pool.Hit || r.Verdict != "timeout" || r.WallMs > 5000 {
		t.Fatalf("want a pool hit stopped at 1s: hit %v, verdict %s, wall %.0f ms", r.Pool.Hit, r.Verdict, r.WallMs)
	}
	if r.Limits.TimeoutMs != 1000 {
		t.Errorf("limits.timeout_ms %d: the run was stopped at 1000", r.Limits.TimeoutMs)
	}
}

// TestAttackRequestLimitsLoosenTheJail: a request tries to loosen its
// profile through the limits' own edges: 0, which for cpu_time and
// file_size means no limit at all; swap, where 0 is the tightest; a key
// that names a field outside [limits] (an allowlist); and an older name
// given beside the new one. Each must be refused, never merged.
func TestAttackRequestLimitsLoosenTheJail(t *testing.T) {
	prof := filepath.Join(t.TempDir(), "capped.toml")
	if err := os.WriteFile(prof, []byte("extends = \"python\"\n[limits]\ncpu_time = \"5s\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "--pool", "0", "--profile", prof)
	for _, c := range []struct {
		body   string
		status int
		want   string
	}{
		{`{"code": "1", "limits": {"cpu_time": 0}}`, 422, "limits.cpu_time: 0 (no limit) is above the ceiling of 5s"},
		{`{"code": "1", "limits": {"file_size": "0"}}`, 422, "limits.file_size: 0 (no limit) is above the ceiling of 64M"},
		{`{"code": "1", "limits": {"swap": "1G"}}`, 422, "limits.swap: 1G is above the ceiling of 0"},
		{`{"code": "1", "limits": {"network.allow": ["example.org"]}}`, 400, "limits.network.allow: unknown limit"},
		{`{"code": "1", "limits": {"output": "1k", "output_limit": "2M"}}`, 400, "limits.output_limit: the same limit as limits.output; give one"},
	} {
		status, _, body := s.post(c.body)
		if status != c.status || !strings.Contains(string(body), c.want) {
			t.Errorf("%s: %d %s, want %d saying %q", c.body, status, body, c.status, c.want)
		}
	}
	r := s.run(api.RunRequest{Code: code("print(1)"), Limits: api.Limits{"cpu_time": "2s", "file_size": "1M"}})
	if r.Verdict != "ok" || r.Limits.CPUTimeMs == nil || *r.Limits.CPUTimeMs != 2000 || r.Limits.FileSizeBytes == nil || *r.Limits.FileSizeBytes != 1<<20 {
		t.Errorf("tighter limits at the edges: %+v", r.Limits)
	}
}
