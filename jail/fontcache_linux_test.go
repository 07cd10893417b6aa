package jail

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

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
	if exec.Command("/usr/bin/python3", "-c", "import matplotlib").Run() != nil {
		t.Skip("needs Debian's python3-matplotlib")
	}
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

	s := py("print('JAIL' + 'RAN')")
	s.Host.CacheDir = cache
	s.Timeout = 10 * time.Second
	done := make(chan error, 1)
	var r *Result
	go func() {
		var err error
		r, err = Run(context.Background(), s, Streams{})
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil || r.Verdict != VerdictOK || r.Stdout != "JAILRAN\n" {
			t.Fatalf("run: %v %+v", err, r)
		}
	case <-time.After(60 * time.Second):
		holder.Process.Kill() // lets the run go on, so the test can end
		<-done
		t.Fatal("a run with --timeout 10s still waited after 60 s for the font cache lock another user holds")
	}
}
