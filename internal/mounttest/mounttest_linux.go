// Package mounttest mounts what a test needs mounted and unmounts it at
// the test's end. It is test support only; nothing outside tests imports
// it.
package mounttest

import (
	"os"
	"syscall"
	"testing"
)

// Pin makes the directory dir and mounts a small tmpfs on it, as a mount
// that keeps a directory from being removed (a kernel slow to let go of
// something would pin it so). unpin unmounts it; the test's cleanup
// detaches it if unpin was not called.
func Pin(t testing.TB, dir string) (unpin func() error) {
	t.Helper()
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("stockade-test-pin", dir, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatal(err)
	}
	pinned := true
	t.Cleanup(func() {
		if pinned {
			syscall.Unmount(dir, syscall.MNT_DETACH)
		}
	})
	return func() error {
		if err := syscall.Unmount(dir, 0); err != nil {
			return err
		}
		pinned = false
		return nil
	}
}
