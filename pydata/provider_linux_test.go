package pydata

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/proctest"
	"github.com/stockade/stockade/internal/testenv"
	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/profiles"
)

// py is a run of python3 -c code under the python profile, on a host whose
// cache directory is cache and whose one provider is the font cache: what
// stockade's commands give every jail.
func py(code, cache string) jail.Spec {
	h := jail.DefaultHost()
	h.CacheDir = cache
	h.Providers = []jail.Provider{FontCache{}}
	return profiles.Defaults().Spec([]string{"python3", "-c", code}, h)
}

// mustRun runs s by the test's own deadline (twice its timeout and 30 s
// for a loaded machine), failing the test on an error.
func mustRun(t *testing.T, s jail.Spec) *jail.Result {
	t.Helper()
	var r *jail.Result
	var err error
	if proctest.Within(t, 2*s.Timeout+30*time.Second, func(ctx context.Context) { r, err = jail.Run(ctx, s, jail.Streams{}) }) {
		t.Fatalf("%.60q ran past its timeout of %v", s.Args, s.Timeout)
	}
	if err != nil {
		t.Fatalf("Run(%.60q): %v", s.Args, err)
	}
	return r
}

// reachableTempDir is a temporary directory the jail's user can reach.
func reachableTempDir(t *testing.T) string {
	dir := t.TempDir()
	os.Chmod(filepath.Dir(dir), 0o755)
	os.Chmod(dir, 0o755)
	return dir
}

// needMatplotlib skips a test on a host without Debian's matplotlib.
func needMatplotlib(t *testing.T) {
	if exec.Command("/usr/bin/python3", "-c", "import matplotlib").Run() != nil {
		t.Skip("needs Debian's python3-matplotlib")
	}
}

// TestAttackFontCacheIsReadOnly: the first run builds the font cache, the
// next ones use it, and none can change it: writing through matplotlib's
// link, into the bound directory or replacing the file all fail, and the
// host's copy is the one the builder stored.
func TestAttackFontCacheIsReadOnly(t *testing.T) {
	testenv.NeedJail(t)
	needMatplotlib(t)
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
`, cache)
	r := mustRun(t, s)
	if r.Verdict != jail.VerdictOK || r.Stdout != "4\n" || r.Stderr != "" {
		t.Fatalf("verdict %s stdout %q stderr %q", r.Verdict, r.Stdout, r.Stderr)
	}
	files, _ := filepath.Glob(filepath.Join(cache, "matplotlib", "*", "fontlist-*.json"))
	if len(files) != 1 {
		t.Fatalf("cache files %v, want one", files)
	}
	before, _ := os.ReadFile(files[0])
	fi, _ := os.Stat(files[0])
	if r = mustRun(t, s); r.Verdict != jail.VerdictOK || r.Stdout != "4\n" {
		t.Fatalf("second run: %+v", r)
	}
	after, _ := os.ReadFile(files[0])
	fi2, _ := os.Stat(files[0])
	if string(after) != string(before) || !fi2.ModTime().Equal(fi.ModTime()) {
		t.Fatal("the cache changed in a jail's run")
	}
}

// TestAttackFontCacheLockHeldByAnotherUser: the font cache's base is 0755
// (every jail user reads the cache bound from it), so any local user can
// open it and flock it, and the first run after an upgrade of Python,
// matplotlib or a font (a new key) waited for that lock without end,
// before its jail even started and outside --timeout: one unprivileged
// process held every root run, and every request of stockade serve, on
// /var/cache/stockade/matplotlib. A run must not wait on a lock another
// user can take.
func TestAttackFontCacheLockHeldByAnotherUser(t *testing.T) {
	testenv.NeedJail(t)
	testenv.NeedRoot(t, "holds the lock as another user")
	needMatplotlib(t)
	cache := reachableTempDir(t)
	base := filepath.Join(cache, "matplotlib")
	if err := os.Mkdir(base, 0o755); err != nil { // as a run before the upgrade left it
		t.Fatal(err)
	}
	holder := exec.Command("/usr/bin/python3", "-c", `import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(120)`, base)
	holder.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "held\n" {
		t.Fatalf("the other user could not take the lock: %q", line)
	}

	s := py("print('JAIL' + 'RAN')", cache)
	s.Timeout = 10 * time.Second
	done := make(chan error, 1)
	var r *jail.Result
	go func() {
		var err error
		r, err = jail.Run(context.Background(), s, jail.Streams{})
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil || r.Verdict != jail.VerdictOK || r.Stdout != "JAILRAN\n" {
			t.Fatalf("run: %v %+v", err, r)
		}
	case <-time.After(60 * time.Second):
		holder.Process.Kill() // lets the run go on, so the test can end
		<-done
		t.Fatal("a run with --timeout 10s still waited after 60 s for the font cache lock another user holds")
	}
}

// A payload that brings its own MPLCONFIGDIR (the run that builds the
// cache does) gets nothing; nor does a root without matplotlib. Neither
// looks at the cache directory at all.
func TestFontCacheProvidesNothingWhenNotWanted(t *testing.T) {
	cache := filepath.Join(t.TempDir(), "never")
	for name, s := range map[string]jail.Spec{
		"own MPLCONFIGDIR": {Env: []string{"MPLCONFIGDIR=/tmp/mine"}, Host: jail.Host{CacheDir: cache}},
		"root without any": {Rootfs: t.TempDir(), Host: jail.Host{CacheDir: cache}},
	} {
		p, err := FontCache{}.Provide(context.Background(), s, nil)
		if err != nil || len(p.Binds)+len(p.Dirs)+len(p.Links)+len(p.Env) != 0 {
			t.Errorf("%s: %+v %v, want nothing", name, p, err)
		}
	}
	if _, err := os.Stat(cache); err == nil {
		t.Error("the cache directory was made")
	}
}
