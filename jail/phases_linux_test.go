package jail

import (
	"slices"
	"testing"

	"github.com/stockade/stockade/jail/internal/jailinit"
)

// A traced run has a mark for every step of stockade's and of init's, on
// one clock: in the order the run takes them (init's marks between
// stockade's clone and its wait, the payload's end after its start), each
// no earlier than the one before.
func TestPhasesOfARealRun(t *testing.T) {
	s := spec("python3", "-c", "pass")
	s.Host.TracePhases = true
	res := mustRun(t, s)
	var names []string
	for i, p := range res.Phases {
		names = append(names, p.Name)
		if p.StartUs <= 0 {
			t.Errorf("phase %q starts at %d µs, not after the process's start", p.Name, p.StartUs)
		}
		if i > 0 && p.StartUs < res.Phases[i-1].StartUs {
			t.Errorf("phase %q (%d µs) before the one listed ahead of it, %q (%d µs)", p.Name, p.StartUs, res.Phases[i-1].Name, res.Phases[i-1].StartUs)
		}
	}
	// Each process's marks in the order of its steps, with others (the
	// placement on cgroup v1) between; the two overlap from the clone on.
	var parent []string
	parent = append(parent, "prepare")
	for _, st := range prepareSteps(&preparation{p: &Prepared{}}) {
		parent = append(parent, st.name)
	}
	parent = append(parent, "start", "init reaped", "output drained", "read the cgroup",
		"close", "remove the cgroup", "remove the run directory", "release the run lock", "closed")
	child := []string{"init: main", "init: config read"}
	for _, n := range jailinit.ContainStepNames() {
		child = append(child, "init: "+n)
	}
	child = append(child, "init: payload started", "init: payload exited")
	pos := func(n string) int {
		i := slices.Index(names, n)
		if i < 0 {
			t.Fatalf("no phase %q in %v", n, names)
		}
		return i
	}
	for _, chain := range [][]string{parent, child} {
		for i := 1; i < len(chain); i++ {
			if pos(chain[i-1]) > pos(chain[i]) {
				t.Errorf("phase %q after %q: %v", chain[i-1], chain[i], names)
			}
		}
	}
	// Where one process waits for the other, the marks of the two, read
	// on one clock, must show it.
	for _, b := range [][2]string{
		{"clone init", "init: main"},
		{"send the plan", "init: config read"},  // init reads what stockade sent
		{"init: payload started", "start"},      // Run starts the clock once init said so
		{"init: payload exited", "init reaped"}, // ...and reaps it once it ended
	} {
		if pos(b[0]) > pos(b[1]) {
			t.Errorf("phase %q after %q: %v", b[0], b[1], names)
		}
	}

	s.Host.TracePhases = false
	if res := mustRun(t, s); res.Phases != nil {
		t.Errorf("a run that did not ask has phases: %v", res.Phases)
	}
}
