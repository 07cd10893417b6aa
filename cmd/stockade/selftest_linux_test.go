package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stockade/stockade/internal/clitest"
	"github.com/stockade/stockade/internal/testenv"
	"github.com/stockade/stockade/jail"
)

func TestSelftestHoldsUnderTheDefaultProfile(t *testing.T) {
	testenv.NeedJail(t)
	code, out, errs := invoke(t, "", "selftest", "--json")
	var rep clitest.SelftestReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s\n%s", err, out, errs)
	}
	for _, r := range rep.Rows {
		if r.Status == "FAIL" {
			t.Errorf("%s / %s: %s", r.Door, r.Attack, r.Happened)
		}
	}
	if code != 0 || rep.Failed != 0 || rep.Passed < 40 {
		t.Fatalf("exit %d, %d passed, %d failed", code, rep.Passed, rep.Failed)
	}
}

func TestSelftestExits1WhenADoorIsOpen(t *testing.T) {
	testenv.NeedJail(t)
	dir := t.TempDir()
	prof := filepath.Join(dir, "open.toml")
	os.WriteFile(prof, []byte("extends = \"python\"\n[seccomp]\npolicy = \"off\"\n"), 0o644)
	code, out, _ := invoke(t, "", "selftest", "--profile", prof)
	if code != 1 || !strings.Contains(out, "FAIL") || !strings.Contains(out, "DOORS OPEN") {
		t.Fatalf("seccomp off: exit %d\n%s", code, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "kernel ") && !strings.HasSuffix(strings.TrimSpace(line), "FAIL") {
			t.Errorf("kernel row held with seccomp off: %s", line)
		}
	}
}

func TestSelftestBadProfileExits125(t *testing.T) {
	code, _, errs := invoke(t, "", "selftest", "--profile", "/nonexistent/profile.toml")
	if code != jail.ExitJailError || !strings.Contains(errs, "profile") {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
}

// When no jail can start at all, every attack would fail for that one
// reason and read as every door open. The suite must say it tested nothing,
// with the reason, and exit 125 instead.
func TestSelftestCouldNotStartAJailExits125(t *testing.T) {
	testenv.NeedJail(t)
	for _, asJSON := range []bool{false, true} {
		args := []string{"selftest", "--cgroup-parent", "stockade-no-such-parent-" + t.Name()}
		if asJSON {
			args = append(args, "--json")
		}
		code, out, errs := invoke(t, "", args...)
		if code != jail.ExitJailError || !strings.Contains(errs, "could not start a jail: cgroup:") ||
			strings.Contains(out+errs, "DOORS OPEN") || strings.Contains(out, " passed, ") ||
			(asJSON && !strings.Contains(out, `"no_jail": true`)) {
			t.Fatalf("json %v: exit %d, stdout %q, stderr %q", asJSON, code, out, errs)
		}
	}
}

// --no-cgroup reaches every attack: the report says cgroup off and each run
// is degraded, and the doors that do not need a cgroup still hold.
func TestSelftestNoCgroupRunsWithoutCgroups(t *testing.T) {
	testenv.NeedJail(t)
	code, out, errs := invoke(t, "", "selftest", "--no-cgroup", "--json")
	var rep clitest.SelftestReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s\n%s", err, out, errs)
	}
	if rep.Cgroup != "off" || rep.Passed < 30 {
		t.Fatalf("exit %d, cgroup %q, %d passed, %d failed", code, rep.Cgroup, rep.Passed, rep.Failed)
	}
	for _, r := range rep.Rows {
		if r.Status == "FAIL" && r.Door != "resources" {
			t.Errorf("without a cgroup, %s / %s failed: %s", r.Door, r.Attack, r.Happened)
		}
	}
}

// --door narrows the suite to the doors named, and a door that does not
// exist is a bad invocation, not an empty pass.
func TestSelftestDoorFlag(t *testing.T) {
	testenv.NeedJail(t)
	code, out, errs := invoke(t, "", "selftest", "--json", "--door", "identity", "--door", "runs")
	var rep clitest.SelftestReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s\n%s", err, out, errs)
	}
	doors := map[string]int{}
	for _, r := range rep.Rows {
		doors[r.Door]++
	}
	if code != 0 || len(doors) != 2 || doors["identity"] == 0 || doors["runs"] == 0 || rep.Failed != 0 {
		t.Fatalf("--door identity --door runs: exit %d, rows per door %v, %d failed", code, doors, rep.Failed)
	}
	code, _, errs = invoke(t, "", "selftest", "--door", "windows")
	if code != jail.ExitJailError || !strings.Contains(errs, `--door "windows": no such door (network, files,`) {
		t.Fatalf("--door windows: exit %d, stderr %q", code, errs)
	}
}
