package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/clitest"
	"github.com/stockade/stockade/internal/proctest"
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
	bin := clitest.BuiltBinary(t)
	// Five runs, one of them stopped by a 2 s timeout.
	var combined bytes.Buffer
	cmd := exec.Command("../../scripts/demo", bin)
	cmd.Stdout, cmd.Stderr = &combined, &combined
	o := proctest.Run(t, cmd, 2*time.Minute)
	demo := o.Stdout
	if o.Err != nil {
		t.Fatalf("scripts/demo: %v\n%s", o.Err, demo)
	}
	steps := parseDemo(t, demo)
	if len(steps) < 5 {
		t.Fatalf("%d commands in the demo's output:\n%s", len(steps), demo)
	}
	// The data stack's step: on a fresh machine it failed with
	// ModuleNotFoundError until scripts/deps demo installed the stack.
	last := steps[len(steps)-1]
	if !strings.Contains(last.cmd, "import pandas as pd, matplotlib.pyplot as plt") || last.exit != 0 ||
		last.out != "{'Lima': 7, 'Oslo': 15} chart.png written\n" {
		t.Errorf("the demo's data stack step: %+v", last)
	}
	for _, s := range steps {
		var combined bytes.Buffer
		cmd := exec.Command("bash", "-c", s.cmd)
		cmd.Env = os.Environ()
		cmd.Stdout, cmd.Stderr = &combined, &combined
		r := proctest.Run(t, cmd, time.Minute)
		out := r.Stdout
		code, ok := proctest.ExitCode(r.Err)
		if !ok {
			t.Fatalf("%s: %v", s.cmd, r.Err)
		}
		if code != s.exit || !sameOutput(string(out), s.out) {
			t.Errorf("$ %s\nin the demo: exit %d, %q\nrun as printed: exit %d, %q", s.cmd, s.exit, s.out, code, out)
		}
	}
}
