package jail

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stockade/stockade/internal/testenv"
)

// TestOversizedPlanLeavesNothingBehind: a plan too large to send
// (sendPlan) ends the run after init has started and the run's cgroup is
// made (on v1, before init is moved into it): no cgroup, run directory or
// process of the run may be left.
func TestOversizedPlanLeavesNothingBehind(t *testing.T) {
	testenv.NeedJail(t)
	ours := func() []string {
		var left []string
		for _, h := range []string{"pids", "memory", "cpu"} {
			filepath.Walk("/sys/fs/cgroup/"+h, func(p string, fi os.FileInfo, err error) error {
				if err == nil && fi.IsDir() && strings.Contains(filepath.Base(p), fmt.Sprintf("-%d-", os.Getpid())) {
					left = append(left, p)
				}
				return nil
			})
		}
		return left
	}
	before, cgBefore := snapshot(t), ours()
	s := spec("true")
	s.Env = append(s.Env, "BIG="+strings.Repeat("x", 1<<20))
	_, err := runJail(t, s, Streams{})
	if err == nil || !strings.Contains(err.Error(), "a jail's plan may") {
		t.Fatalf("a plan over the limit: %v, want the plan's size refused", err)
	}
	t.Logf("refused: %v", err)
	after := snapshot(t)
	if len(after.runDirs) != len(before.runDirs) {
		t.Errorf("run directories left: before %v, after %v", before.runDirs, after.runDirs)
	}
	if cg := ours(); len(cg) != len(cgBefore) {
		t.Errorf("cgroups left: before %v, after %v", cgBefore, cg)
	}
}
