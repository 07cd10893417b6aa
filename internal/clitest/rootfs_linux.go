package clitest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stockade/stockade/rootfs/image"
)

// BuiltRootfs returns the root `stockade rootfs build` made in
// $STOCKADE_ROOTFS_CACHE (debootstrap, cached across runs; `make check`
// sets it to build/rootfs-cache), building it if needed, or skips. A
// relative cache is the repository's (go test runs in the package's
// directory, one level down).
func BuiltRootfs(t *testing.T) string {
	t.Helper()
	cache := os.Getenv("STOCKADE_ROOTFS_CACHE")
	if cache == "" {
		t.Skip("set STOCKADE_ROOTFS_CACHE=DIR to debootstrap a root into DIR/bookworm (about a minute, once)")
	}
	if !filepath.IsAbs(cache) {
		wd, _ := os.Getwd()
		cache = filepath.Join(filepath.Dir(wd), cache)
	}
	dir := filepath.Join(cache, image.DefaultSuite)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if _, err := image.EnsureBuilt(ctx, dir, image.BuildOptions{}); err != nil {
		t.Fatal(err)
	}
	return dir
}
