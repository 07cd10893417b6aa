package image

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestAttackEnsureBuiltLockOthersCanOpen: anyone who can open a file can
// flock it, so a lock file beside the root that another user could open
// would let them hold it and keep every build (and every test binary
// waiting for one) waiting without end. EnsureBuilt's lock is 0600, and a
// lock file others could open (a mode that lets them, a file of theirs, a
// symlink in its place) is refused at once rather than waited on.
func TestAttackEnsureBuiltLockOthersCanOpen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), DefaultSuite)
	opts, err := BuildOptions{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	// A root already built as asked: EnsureBuilt takes the lock, reads the
	// stamp and returns without building.
	if err := os.MkdirAll(filepath.Join(dir, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := writeStamp(dir, opts); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lock := dir + ".lock"
	if built, err := EnsureBuilt(ctx, dir, BuildOptions{}); err != nil || built {
		t.Fatalf("EnsureBuilt of a built root = %v, %v", built, err)
	}
	fi, err := os.Lstat(lock)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Fatalf("lock file: %v %v, want a regular file 0600", fi, err)
	}
	refused := func(what string) {
		t.Helper()
		if _, err := EnsureBuilt(ctx, dir, BuildOptions{}); err == nil {
			t.Errorf("a lock file %s was used", what)
		}
	}
	os.Chmod(lock, 0o644)
	refused("others can open (0644)")
	os.Chmod(lock, 0o600)
	if os.Geteuid() == 0 {
		os.Chown(lock, 4242, 4242)
		refused("of another user")
	}
	os.Remove(lock)
	os.Symlink("/etc/passwd", lock)
	refused("that is a symlink to /etc/passwd")
}
