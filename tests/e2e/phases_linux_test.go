package e2e

import (
	"encoding/json"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stockade/stockade/internal/testenv"
)

// run --phases prints the table on stderr, from the process's start to
// its exit, with the command line's steps, stockade's and init's, and the
// result carries the same list; without it, neither.
func TestPhasesFlagPrintsTheTable(t *testing.T) {
	testenv.NeedJail(t)
	bin := testenv.NeedBinary(t, "whose main marks its own start")
	out, err := exec.Command(bin, "run", "--phases", "--json", "--", "python3", "-c", "pass").Output()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var res struct {
		Phases []struct {
			Name    string `json:"name"`
			StartUs int64  `json:"start_us"`
		} `json:"phases"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "run", "--phases", "--", "python3", "-c", "pass")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	table := stderr.String()
	if !regexp.MustCompile(`(?m)^stockade: phases \(.*CLOCK_MONOTONIC \d+ ns`).MatchString(table) {
		t.Fatalf("no phase table header on stderr: %q", table)
	}
	row := regexp.MustCompile(`(?m)^ *(\d+) +\d* +(.+)$`)
	var names []string
	last := int64(-1)
	for _, m := range row.FindAllStringSubmatch(table, -1) {
		at, _ := strconv.ParseInt(m[1], 10, 64)
		if at < last {
			t.Errorf("%q at %d µs, before the row above it (%d µs)", m[2], at, last)
		}
		last = at
		names = append(names, m[2])
	}
	want := []string{"main: close inherited descriptors", "main: read flags and profile", "main: run the jail",
		"prepare", "clone init", "init: main", "init: exec", "init: payload exited", "closed", "main: report", "main: exit"}
	for _, w := range want {
		found := false
		for _, n := range names {
			found = found || n == w
		}
		if !found {
			t.Errorf("no row %q in the table:\n%s", w, table)
		}
	}
	if len(res.Phases) < len(want)-1 || res.Phases[0].Name != "main: close inherited descriptors" {
		t.Errorf("the result's phases: %v", res.Phases)
	}

	out, err = exec.Command(bin, "run", "--json", "--", "python3", "-c", "pass").Output()
	if err != nil || strings.Contains(string(out), `"phases"`) {
		t.Errorf("a run without --phases: %v, %s", err, out)
	}
}
