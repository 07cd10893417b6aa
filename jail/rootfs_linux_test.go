package jail

import (
	"strings"
	"testing"

	"github.com/stockade/stockade/internal/clitest"
	"github.com/stockade/stockade/internal/testenv"
)

// TestRunInBuiltRootfs runs Python in a root that `stockade rootfs build`
// made (debootstrap, cached across runs in $STOCKADE_ROOTFS_CACHE, which
// `make check` sets to build/rootfs-cache).
func TestRunInBuiltRootfs(t *testing.T) {
	testenv.NeedJail(t)
	dir := clitest.BuiltRootfs(t)
	s := py("import json, sys, os; print(json.dumps([sys.prefix, os.getuid(), open('/etc/os-release').read().count('bookworm') > 0]))")
	s.Rootfs = dir
	r := mustRun(t, s)
	if r.Verdict != VerdictOK || strings.TrimSpace(r.Stdout) != `["/usr", 1000, true]` {
		t.Fatalf("python in the built root: %+v", r)
	}
	// The root is read-only and the jail's own mounts are on top of it.
	s = spec("sh", "-c", "touch /usr/x 2>/dev/null && echo WRITABLE; touch /tmp/x /work/x && grep -c sandbox /etc/passwd")
	s.Rootfs = dir
	if r := mustRun(t, s); r.Stdout != "1\n" {
		t.Fatalf("built root: %+v", r)
	}
}
