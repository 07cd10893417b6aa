package server

import (
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/profiles"
)

// The precedence of an exec's verdicts, and when its state may be said
// to be kept: only when the driver answered and lives on.
func TestExecVerdictPrecedence(t *testing.T) {
	for _, c := range []struct {
		name  string
		f     execFacts
		want  api.Verdict
		state string
	}{
		{"answered", execFacts{Answered: true}, api.ExecOK, "kept"},
		{"raised", execFacts{Answered: true, Exception: true}, api.ExecException, "kept"},
		{"output cut beats the exception", execFacts{Answered: true, Exception: true, OutputCut: true}, api.ExecOutput, "kept"},
		{"timeout answered: not the KeyboardInterrupt exception", execFacts{Answered: true, Exception: true, TimedOut: true}, api.ExecTimeout, "kept"},
		{"timeout unanswered", execFacts{TimedOut: true, JailEnded: true}, api.ExecTimeout, "lost"},
		{"interrupt answered", execFacts{Answered: true, Exception: true, Interrupted: true}, api.ExecInterrupted, "kept"},
		{"timeout beats interrupt", execFacts{Answered: true, TimedOut: true, Interrupted: true}, api.ExecTimeout, "kept"},
		{"the interpreter died", execFacts{JailEnded: true}, api.ExecKilled, "lost"},
		{"answered, then the jail ended", execFacts{Answered: true, JailEnded: true}, api.ExecKilled, "lost"},
		{"an OOM kill beats everything", execFacts{OOMKilled: true, TimedOut: true, Broken: true, JailEnded: true}, api.ExecMemory, "lost"},
		{"an OOM kill of a child, the driver answered", execFacts{OOMKilled: true, Answered: true}, api.ExecMemory, "kept"},
		{"a broken channel is never ok", execFacts{Broken: true, Answered: true}, api.ExecFailed, "lost"},
		{"a broken channel beats the timeout", execFacts{Broken: true, TimedOut: true}, api.ExecFailed, "lost"},
	} {
		if got := c.f.verdict(); got != c.want {
			t.Errorf("%s: verdict %s, want %s", c.name, got, c.want)
		}
		if got := c.f.state(); got != c.state {
			t.Errorf("%s: state %s, want %s", c.name, got, c.state)
		}
	}
}

func TestCheckWorkPath(t *testing.T) {
	for p, ok := range map[string]bool{
		"a.txt": true, "dir/sub/file.csv": true, ".hidden": true, "a..b": true,
		"": false, ".": false, "..": false, "../x": false, "a/../../x": false, "/etc/passwd": false,
		"a//b": false, "a/./b": false, "a/": false, "a\x00b": false, strings.Repeat("d/", 40) + "f": false,
		strings.Repeat("x", 256): false, figureDir: false, figureDir + "x": true,
	} {
		err := checkWorkPath(p)
		if (err == nil) != ok {
			t.Errorf("%q: %v, want ok %v", p, err, ok)
		}
		if err != nil && err.(*api.Error).Status != 400 {
			t.Errorf("%q: status %d", p, err.(*api.Error).Status)
		}
	}
}

func TestSessionDurations(t *testing.T) {
	if d, err := sessionDuration("ttl", "", time.Hour); err != nil || d != time.Hour {
		t.Errorf("default: %v %v", d, err)
	}
	if d, err := sessionDuration("ttl", "10m", time.Hour); err != nil || d != 10*time.Minute {
		t.Errorf("10m: %v %v", d, err)
	}
	for v, status := range map[string]int{"2h": 422, "0s": 400, "-1s": 400, "soon": 400} {
		if _, err := sessionDuration("idle_timeout", v, time.Hour); err == nil || err.(*api.Error).Status != status {
			t.Errorf("%s: %v, want %d", v, err, status)
		}
	}
	if _, err := execTimeout("11s", 10*time.Second); err == nil || err.(*api.Error).Status != 422 {
		t.Errorf("an exec's timeout above the session's: %v", err)
	}
}

// What one exec added to the supervisor's and the proxy's running lists.
func TestUsageSince(t *testing.T) {
	b := blockedSince([]jail.BlockedSyscall{{Name: "mount", Count: 2}},
		[]jail.BlockedSyscall{{Name: "mount", Count: 5, Example: "m"}, {Name: "ptrace", Count: 1}})
	if len(b) != 2 || b[0].Count != 3 || b[0].Example != "m" || b[1].Count != 1 {
		t.Errorf("blocked: %+v", b)
	}
	if b := blockedSince([]jail.BlockedSyscall{{Name: "mount", Count: 2}}, []jail.BlockedSyscall{{Name: "mount", Count: 2}}); len(b) != 0 {
		t.Errorf("nothing new: %+v", b)
	}
	n := networkSince([]jail.NetworkDecision{{Host: "1.2.3.4", Port: 80, Via: "connect", Count: 1}},
		[]jail.NetworkDecision{{Host: "1.2.3.4", Port: 80, Via: "connect", Count: 3}, {Host: "pypi.org", Port: 443, Via: "connect", Count: 1}})
	if len(n) != 2 || n[0].Count != 2 || n[1].Host != "pypi.org" {
		t.Errorf("network: %+v", n)
	}
}

// The metrics text parses with the tests' own parser, whatever the server
// counted.
func TestMetricsText(t *testing.T) {
	python, err := profiles.Builtin("python")
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Profiles: []Profile{{Name: "p", Policy: python}}})
	if err != nil {
		t.Fatal(err)
	}
	s.metrics.run("ok", 3*time.Millisecond)
	s.metrics.run("timeout", 2*time.Second)
	s.metrics.exec(api.ExecOK, 700*time.Microsecond)
	s.metrics.exec(api.ExecOK, time.Hour)
	s.metrics.sessionCreated(true, time.Millisecond)
	s.metrics.sessionEnded(api.SessionIdle)
	var b strings.Builder
	if err := s.writeMetrics(&b); err != nil {
		t.Fatal(err)
	}
	m, _ := parseMetrics(t, b.String())
	for key, want := range map[string]float64{
		`stockade_runs_total{verdict="ok"}`:             1,
		`stockade_run_seconds_bucket{le="0.0025"}`:      0,
		`stockade_run_seconds_bucket{le="0.005"}`:       1,
		`stockade_run_seconds_bucket{le="2.5"}`:         2,
		`stockade_exec_seconds_bucket{le="0.001"}`:      1,
		`stockade_exec_seconds_bucket{le="300"}`:        1,
		`stockade_exec_seconds_bucket{le="+Inf"}`:       2,
		`stockade_sessions_ended_total{verdict="idle"}`: 1,
		`stockade_pool_ready{profile="p"}`:              0,
	} {
		if m[key] != want {
			t.Errorf("%s = %v, want %v\n%s", key, m[key], want, b.String())
		}
	}
}
