package jail

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/testenv"
	"github.com/stockade/stockade/rootfs/image"
)

// TestRunInBuiltRootfs runs Python in a root that `stockade rootfs build`
// made (debootstrap, cached across runs in $STOCKADE_ROOTFS_CACHE, which
// `make check` sets to build/rootfs-cache).
func TestRunInBuiltRootfs(t *testing.T) {
	testenv.NeedJail(t)
	dir := builtRootfs(t)
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

// builtRootfs returns the root `stockade rootfs build` made in
// $STOCKADE_ROOTFS_CACHE (debootstrap, cached across runs; `make check`
// sets it to build/rootfs-cache), building it if needed, or skips.
func builtRootfs(t *testing.T) string {
	t.Helper()
	cache := os.Getenv("STOCKADE_ROOTFS_CACHE")
	if cache == "" {
		t.Skip("set STOCKADE_ROOTFS_CACHE=DIR to debootstrap a root into DIR/bookworm (about a minute, once)")
	}
	if !filepath.IsAbs(cache) {
		wd, _ := os.Getwd()
		cache = filepath.Join(filepath.Dir(wd), cache) // go test runs in jail/
	}
	dir := filepath.Join(cache, image.DefaultSuite)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if _, err := image.EnsureBuilt(ctx, dir, image.BuildOptions{}); err != nil {
		t.Fatal(err)
	}
	return dir
}
