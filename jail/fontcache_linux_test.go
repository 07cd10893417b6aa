package jail

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stockade/stockade/internal/testenv"
)

// TestAttackFontCacheIsReadOnly: the first run builds the font cache, the
// next ones use it, and none can change it: writing through matplotlib's
// link, into the bound directory or replacing the file all fail, and the
// host's copy is the one the builder stored.
func TestAttackFontCacheIsReadOnly(t *testing.T) {
	testenv.NeedJail(t)
	if exec.Command("/usr/bin/python3", "-c", "import matplotlib").Run() != nil {
		t.Skip("needs Debian's python3-matplotlib")
	}
	cache := reachableTempDir(t)
	s := py(`
import os
import matplotlib.pyplot as plt
plt.plot([1, 2]); plt.savefig("/tmp/a.png")
held = []
for p in ["/tmp/matplotlib/fontlist-v330.json", "/run/stockade/matplotlib/fontlist-v330.json", "/run/stockade/matplotlib/new.json"]:
    try:
        with open(p, "a") as f:
            f.write("poison")
    except OSError as e:
        held.append(e.errno)
try:
    os.rename("/tmp/a.png", "/run/stockade/matplotlib/fontlist-v330.json")
except OSError as e:
    held.append(e.errno)
print(len(held))
`)
	s.Host.CacheDir = cache
	s.Env = []string{"MPLBACKEND=Agg"}
	r := mustRun(t, s)
	if r.Verdict != VerdictOK || r.Stdout != "4\n" || r.Stderr != "" {
		t.Fatalf("verdict %s stdout %q stderr %q", r.Verdict, r.Stdout, r.Stderr)
	}
	files, _ := filepath.Glob(filepath.Join(cache, "matplotlib", "*", "fontlist-*.json"))
	if len(files) != 1 {
		t.Fatalf("cache files %v, want one", files)
	}
	before, _ := os.ReadFile(files[0])
	fi, _ := os.Stat(files[0])
	if r = mustRun(t, s); r.Verdict != VerdictOK || r.Stdout != "4\n" {
		t.Fatalf("second run: %+v", r)
	}
	after, _ := os.ReadFile(files[0])
	fi2, _ := os.Stat(files[0])
	if string(after) != string(before) || !fi2.ModTime().Equal(fi.ModTime()) {
		t.Fatal("the cache changed in a jail's run")
	}
}
