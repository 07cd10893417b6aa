package jail

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/stockade/stockade/internal/testenv"
)

// jail.Run is a library entry too: a Spec that bypassed the profile
// validator is refused by Run before anything exists on the host, and a
// bind below /work never plants its mount point in a --workdir.
func TestAttackIncompleteOrReservedSpecRefusedBeforeAnything(t *testing.T) {
	testenv.NeedJail(t)
	dir := reachableTempDir(t)
	cases := map[string]func(*Spec){
		"bind below /work": func(s *Spec) {
			s.Workdir = dir
			s.ReadOnly = []Bind{{Source: "/usr/share", Dest: "/work/x"}}
		},
		"zero pids":        func(s *Spec) { s.Cgroup.PidsMax = 0 },
		"zero timeout":     func(s *Spec) { s.Timeout = 0 },
		"no seccomp named": func(s *Spec) { s.Seccomp = "" },
	}
	for name, mod := range cases {
		s := spec("true")
		mod(&s)
		res, err := Run(context.Background(), s, Streams{})
		if err == nil || res.Verdict != VerdictError || res.ExitCode != ExitJailError || !strings.HasPrefix(err.Error(), "spec: ") {
			t.Errorf("%s: %v, verdict %s exit %d; want a spec error", name, err, res.Verdict, res.ExitCode)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("the workdir holds %v, want nothing", ents)
	}
}
