package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// demoStep is one command `make demo` showed, with what it printed.
type demoStep struct {
	cmd  string
	out  string
	exit int
}

// demoPrompt is a command line as scripts/demo prints it; demoExit ends
// its output.
var (
	demoPrompt = regexp.MustCompile(`^\$ (.+)$`)
	demoExit   = regexp.MustCompile(`^\(exit (\d+)\)$`)
)

func parseDemo(t *testing.T, out string) []demoStep {
	t.Helper()
	var steps []demoStep
	var cur *demoStep
	for _, line := range strings.Split(out, "\n") {
		if m := demoPrompt.FindStringSubmatch(line); m != nil && cur == nil {
			cur = &demoStep{cmd: m[1]}
			continue
		}
		if cur == nil {
			continue
		}
		if m := demoExit.FindStringSubmatch(line); m != nil {
			cur.exit, _ = strconv.Atoi(m[1])
			steps = append(steps, *cur)
			cur = nil
			continue
		}
		cur.out += line + "\n"
	}
	if cur != nil {
		t.Fatalf("the demo's last command %q has no (exit N) line", cur.cmd)
	}
	return steps
}

// sameOutput compares what a command printed in the demo and when run
// again: exactly, but for a JSON result, whose timings differ from run to
// run; its verdict, exit code and output must not.
func sameOutput(a, b string) bool {
	var ra, rb map[string]any
	if json.Unmarshal([]byte(a), &ra) == nil && json.Unmarshal([]byte(b), &rb) == nil {
		for _, k := range []string{"verdict", "exit_code", "stdout", "stderr"} {
			if ra[k] != rb[k] {
				return false
			}
		}
		return true
	}
	return a == b
}

// Every command `make demo` prints is one a reader can copy into a shell:
// run through bash as printed, it prints what the demo printed and exits
// as it did. Printed without their quotes, they did not
// (`python3 -c print(sum(range(100)))` is a bash syntax error).
func TestDemoCommandsRunAsPrinted(t *testing.T) {
	bin := builtBinary(t)
	demo, err := exec.Command("../../scripts/demo", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/demo: %v\n%s", err, demo)
	}
	steps := parseDemo(t, string(demo))
	if len(steps) < 5 {
		t.Fatalf("%d commands in the demo's output:\n%s", len(steps), demo)
	}
	for _, s := range steps {
		cmd := exec.Command("bash", "-c", s.cmd)
		cmd.Env = os.Environ()
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("%s: %v", s.cmd, err)
		}
		if code != s.exit || !sameOutput(string(out), s.out) {
			t.Errorf("$ %s\nin the demo: exit %d, %q\nrun as printed: exit %d, %q", s.cmd, s.exit, s.out, code, out)
		}
	}
}
