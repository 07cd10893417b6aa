package jail

import (
	"testing"

	"github.com/stockade/stockade/internal/proctest"
)

// The host side's preparation in the order its resources depend on one
// another; the test reads the table without running a step, as
// TestContainStepsAreInTheRequiredOrder reads init's.
func TestPrepareStepsAreInTheRequiredOrder(t *testing.T) {
	var names []string
	for _, s := range prepareSteps(&preparation{p: &Prepared{}}) {
		names = append(names, s.name)
	}
	before := [][2]string{
		{"check the spec", "take the run lock"},         // a bad spec leaves nothing behind, not even a lock
		{"compile seccomp", "take the run lock"},        // likewise a policy that does not compile
		{"take the run lock", "make the run directory"}, // the lock's record names the directory for a sweep
		{"take the run lock", "make the cgroup"},        // ...and the cgroup
		{"take the run lock", "choose the identity"},    // the identity is the lock slot's number
		{"choose the identity", "make the run directory"},
		{"choose the identity", "check the read-only binds"}, // sources checked as the caller could read them
		{"choose the identity", "list the root"},
		{"note the workdir", "settle the workdir"},    // the host's clock before and after preparing
		{"list the root", "wait for the root check"},  // the check runs meanwhile
		{"make the run directory", "make the cgroup"}, // the cgroup is named after the directory
		{"make the run directory", "plan the mounts"}, // the new root is in it
		{"render the views", "plan the mounts"},
		{"list the root", "plan the mounts"},
		{"plan the mounts", "describe init"}, // describe decides whether init waits for placement
		{"open the control socket", "describe init"},
		{"open the output pipes", "describe init"},
		{"find init", "describe init"},
		{"describe init", "start the stdin pump"},
		{"make the cgroup", "clone init"},         // cgroup v2: clone3 places init in it
		{"wait for the root check", "clone init"}, // nothing of a bad root is mounted
		{"settle the workdir", "clone init"},      // before init builds the overlay
		{"compile seccomp", "clone init"},
		{"start the stdin pump", "clone init"},
		{"open the network", "clone init"}, // the proxy serves init's listener
		{"clone init", "send the plan"},
		{"send the plan", "wait for the payload"}, // cgroup v1: init placed before it goes on
	}
	proctest.InOrder(t, names, before)
	if names[0] != "check the spec" {
		t.Errorf("checking the spec must be the first step: %v", names)
	}
	if names[len(names)-1] != "wait for the payload" {
		t.Errorf("waiting for the payload must be the last step: %v", names)
	}
}
