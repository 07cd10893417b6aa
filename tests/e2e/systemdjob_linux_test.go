package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/clitest"
	"github.com/stockade/stockade/internal/proctest"
	"github.com/stockade/stockade/internal/testenv"
)

// The shipped scheduled job (examples/systemd/stockade-agent-job.service)
// copied a job.py "from where?", that was never shown, into a run with no
// input and no output. Its ExecStart= now binds the job's input read-only
// at /data and its state directory as /work, and job.py is shipped beside
// it. This runs that ExecStart= as written, but for the host paths (moved
// into the test's directory) and the binary (the built one), and holds
// README's copy of the line to the unit's. (Under systemd itself: make
// vmtest's vmtest/systemd.)
func TestShippedSystemdJobRunsWithItsInputAndOutput(t *testing.T) {
	testenv.NeedJail(t)
	bin := clitest.BuiltBinary(t)
	unit, err := os.ReadFile("../../examples/systemd/stockade-agent-job.service")
	if err != nil {
		t.Fatal(err)
	}
	var execStart string
	for _, l := range strings.Split(string(unit), "\n") {
		if strings.HasPrefix(l, "ExecStart=") {
			execStart = l
		}
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if execStart == "" || !strings.Contains(string(readme), "\n"+execStart+"\n") {
		t.Fatalf("README.md does not show the unit's %q", execStart)
	}
	for _, want := range []string{" --ro /opt/agent/data:/data ", " --workdir /var/lib/stockade-agent ", " /opt/agent/job.py"} {
		if !strings.Contains(execStart, want) {
			t.Errorf("the unit's ExecStart= lacks %q: %s", want, execStart)
		}
	}

	// The jail user opens the binds' sources: every directory on the way
	// must be searchable by others.
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	agent, state := filepath.Join(dir, "opt-agent"), filepath.Join(dir, "state")
	for _, d := range []string{filepath.Join(agent, "data"), state} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	job, err := os.ReadFile("../../examples/systemd/job.py")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(agent, "job.py"), job, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(agent, "data", "sales.csv"), []byte("city,sales\nOslo,10\nLima,7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if os.Getuid() == 0 {
		// systemd's StateDirectory= belongs to User=, never root; as
		// root, the jail would refuse a root-owned --workdir.
		if err := os.Chown(state, 4242, 4242); err != nil {
			t.Fatal(err)
		}
	}
	line := strings.NewReplacer("/usr/local/bin/stockade", bin, "/opt/agent", agent, "/var/lib/stockade-agent", state).
		Replace(strings.TrimPrefix(execStart, "ExecStart="))
	o := proctest.Run(t, exec.Command("sh", "-c", line), 2*time.Minute)
	var r struct{ Verdict, Stdout string }
	if err := json.Unmarshal([]byte(o.Stdout), &r); err != nil || r.Verdict != "ok" {
		t.Fatalf("%s: %v (%v)\nstdout %s\nstderr %s", line, o.Err, err, o.Stdout, o.Stderr)
	}
	if r.Stdout != "job: 1 CSV files, 3 rows; wrote summary.json\n" {
		t.Errorf("the job printed %q", r.Stdout)
	}
	summary, err := os.ReadFile(filepath.Join(state, "summary.json"))
	var counts map[string]int
	if err != nil || json.Unmarshal(summary, &counts) != nil || counts["sales.csv"] != 3 {
		t.Errorf("the job's output in its state directory: %q (%v)", summary, err)
	}
}
