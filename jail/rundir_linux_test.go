package jail

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/stockade/stockade/internal/runlock"
	"github.com/stockade/stockade/internal/testenv"
)

// The jailed code decides what /work holds when the run ends: a tree far
// deeper than PATH_MAX or the fd limit, unreadable directories, fifos, and
// links pointing out of it. removeTree must remove all of it and nothing
// outside.
func TestRemoveTreeOfHostileWork(t *testing.T) {
	outside := t.TempDir()
	keep := filepath.Join(outside, "keep")
	os.WriteFile(keep, []byte("x"), 0o600)
	root := filepath.Join(t.TempDir(), "run")
	os.MkdirAll(filepath.Join(root, "work"), 0o700)
	os.Symlink(outside, filepath.Join(root, "work", "link-to-outside"))
	os.Link(keep, filepath.Join(root, "work", "hardlink"))
	syscall.Mkfifo(filepath.Join(root, "work", "fifo"), 0o600)
	locked := filepath.Join(root, "work", "locked")
	os.MkdirAll(filepath.Join(locked, "inner"), 0o700)
	os.WriteFile(filepath.Join(locked, "inner", "f"), nil, 0o600)
	os.Chmod(filepath.Join(locked, "inner"), 0)
	os.Chmod(locked, 0)

	// 5000 levels: far past PATH_MAX (4096) for any path-based walk.
	deep, err := os.Open(filepath.Join(root, "work"))
	if err != nil {
		t.Fatal(err)
	}
	fd := int(deep.Fd())
	for i := 0; i < 5000; i++ {
		if err := syscall.Mkdirat(fd, "d", 0o700); err != nil {
			t.Fatal(err)
		}
		nfd, err := syscall.Openat(fd, "d", syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if i == 4999 {
			f, _ := syscall.Openat(nfd, "bottom", syscall.O_CREAT|syscall.O_WRONLY, 0o600)
			syscall.Close(f)
		}
		if fd != int(deep.Fd()) {
			syscall.Close(fd)
		}
		fd = nfd
	}
	syscall.Close(fd)
	deep.Close()

	if err := removeTree(root); err != nil {
		t.Fatalf("removeTree: %v", err)
	}
	if _, err := os.Lstat(root); !os.IsNotExist(err) {
		t.Fatalf("%s still exists: %v", root, err)
	}
	if b, err := os.ReadFile(keep); err != nil || string(b) != "x" {
		t.Fatalf("a file outside the tree was touched: %q %v", b, err)
	}
	if err := removeTree(root); err != nil {
		t.Fatalf("removing a tree that is gone: %v", err)
	}
}

func TestRemoveTreeRefusesNonDirectory(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "l")
	os.Symlink(dir, link)
	if err := removeTree(link); err == nil || !strings.Contains(err.Error(), "too many levels") && !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("removeTree through a symlink: %v", err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatal("the link's target went away")
	}
}

// Stockade's own state (run base, lock directories) is never a bind
// source, nor is any directory that holds it, wherever $TMPDIR or
// $STOCKADE_LOCK_DIR put it; a sibling of it is.
func TestBindSourcesRefuseStockadeState(t *testing.T) {
	p := sourcePolicy{own: []string{"/srv/x/stockade/runs", "/var/tmp/stockade-0"}}
	for src, refused := range map[string]bool{
		"/srv": true, "/srv/x": true, "/srv/x/stockade": true, "/srv/x/stockade/runs": true,
		"/srv/x/stockade/runs/0": true, "/var/tmp": true, "/var/tmp/stockade-0/r0-1-2/work": true,
		"/srv/y": false, "/var/tmp/stockade-00": false, "/srv/x/stockade/runs2": false,
	} {
		err := p.checkPath("--ro", src)
		if (err != nil) != refused {
			t.Errorf("--ro %s: %v, want refused %v", src, err, refused)
		}
	}
	own := hostSourcePolicy().own
	for _, want := range []string{RunBase(), runlock.DefaultDir(), runlock.IDDir} {
		if !slices.Contains(own, want) {
			t.Errorf("the host policy leaves out %s: %v", want, own)
		}
	}
}

// A lock directory on a full disk (its own small tmpfs, filled): the run
// stops with exit 125 before any jail, saying "no space left on device"
// and naming the step once (it said "run directory: run directory: ..."),
// and leaves nothing in the lock directory.
func TestFullLockDirSaysSoOnceAndLeavesNothing(t *testing.T) {
	testenv.NeedJail(t)
	testenv.NeedRoot(t, "mounts a tmpfs")
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64k,mode=0755"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	lockDir := filepath.Join(dir, "runs")
	if err := os.Mkdir(lockDir, 0o755); err != nil {
		t.Fatal(err)
	}
	fill, err := os.Create(filepath.Join(dir, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := fill.Write(make([]byte, 4096)); err != nil {
			break
		}
	}
	fill.Close()
	t.Setenv(runlock.DirEnv, lockDir)
	res, err := runJail(t, spec("true"), Streams{})
	if err == nil || res.ExitCode != ExitJailError {
		t.Fatalf("a run with its lock directory full: %v (exit %d), want a refusal", err, res.ExitCode)
	}
	if msg := err.Error(); !strings.Contains(msg, "no space left on device") || strings.Count(msg, "run directory") != 1 {
		t.Errorf("the refusal: %q, want the step named once and the full disk", msg)
	}
	if left, _ := os.ReadDir(lockDir); len(left) > 0 {
		t.Errorf("left in the lock directory: %v", left)
	}
}
