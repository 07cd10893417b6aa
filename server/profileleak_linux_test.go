package server

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stockade/stockade/api"
)

// TestAttackRequestPolicyLeaksIntoNextRequest: one `stockade serve`
// process, two profiles built on the built-in python profile (parsed once
// per process and cloned since 2b6d4b5). A request on the loose profile,
// whose environment, read-only binds and network allow list the default
// profile lacks, and with tighter limits of its own, is followed by a
// default request and by a loose one without limits: neither may see
// anything of the first (its limits, its variables, its bind, its allow
// list), pooled or cold.
func TestAttackRequestPolicyLeaksIntoNextRequest(t *testing.T) {
	cfg := t.TempDir()
	dir := filepath.Join(cfg, "stockade", "profiles")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "loose.toml"), []byte(`extends = "python"
[environment]
vars = { LEAK = "1" }
[filesystem]
ro = ["/usr/share/doc:/leak"]
[network]
allow = ["example.invalid"]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("XDG_CONFIG_HOME", cfg)
	for _, pool := range []string{"0", "1"} {
		t.Run("pool"+pool, func(t *testing.T) {
			s := startServer(t, "--pool", pool, "--profile", "python", "--profile", "loose")
			probe := code(`import os; print(os.environ.get('LEAK'), os.path.exists('/leak'), bool(os.environ.get('HTTPS_PROXY') or os.environ.get('https_proxy')))`)
			r := s.run(api.RunRequest{Profile: "loose", Code: probe, Limits: api.Limits{"memory": "128M", "pids": 16, "timeout": "3s", "cpus": 0.5}})
			if r.Verdict != "ok" || r.Stdout != "1 True True\n" || *r.Limits.MemoryBytes != 128<<20 || r.Limits.Pids == nil || *r.Limits.Pids != 16 {
				t.Fatalf("control: the loose request did not get its own policy: %q %+v", r.Stdout, r.Limits)
			}
			for _, req := range []api.RunRequest{{Code: probe}, {Profile: "python", Code: probe}} {
				s.waitReady()
				d := s.run(req)
				if d.Verdict != "ok" || d.Stdout != "None False False\n" || len(d.Network) != 0 {
					t.Errorf("the default request saw the loose one's policy: %q network %+v", d.Stdout, d.Network)
				}
				if d.Limits.MemoryBytes == nil || *d.Limits.MemoryBytes != 512<<20 || d.Limits.Pids == nil || *d.Limits.Pids != 128 || d.Limits.TimeoutMs != 10000 || d.Limits.CPUs == nil || *d.Limits.CPUs != 1 {
					t.Errorf("the default request's limits are not the profile's: %+v", d.Limits)
				}
			}
			s.waitReady()
			l := s.run(api.RunRequest{Profile: "loose", Code: probe})
			if l.Verdict != "ok" || l.Stdout != "1 True True\n" || *l.Limits.MemoryBytes != 512<<20 || *l.Limits.Pids != 128 {
				t.Errorf("the first request's limits stuck to the loose profile: %q %+v", l.Stdout, l.Limits)
			}
		})
	}
}
