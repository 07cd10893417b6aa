package vmtier

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAttackVMGuestWritesRootImage: the guest's root, as a guest kernel
// the payload took over would, clears its root disk's read-only flag and
// writes the disk's first block (the "writeroot" fault). The root image
// is the host's file, shared by every guest booted from it: the write is
// refused (QEMU attaches it read-only, which the guest's virtio driver
// makes the disk's own read-only flag, out of the guest root's reach)
// and the file's bytes are the same after the run as before. (QEMU's own
// refusal of a write request, from a guest kernel that ignores the flag,
// would need a driver of the test's in the guest: not exercised here.)
func TestAttackVMGuestWritesRootImage(t *testing.T) {
	o := needVM(t)
	img, err := EnsureImage(o.Cache, o.Binary, o.Kernel)
	if err != nil {
		t.Fatal(err)
	}
	// A cache of the test's own, with a copy of the image: were the write
	// let through, the shared cache is not what it spoils.
	o.Cache = t.TempDir()
	for _, f := range []string{img.Initrd, img.Root} {
		if err := copyFile(f, filepath.Join(o.Cache, filepath.Base(f)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	root := filepath.Join(o.Cache, filepath.Base(img.Root))
	before := fileSum(t, root)
	left := watch(&o)
	o.fault = "writeroot"
	res, err := runVM(t, vmSpec(t, "true"), o)
	if err == nil {
		t.Fatalf("the fault's guest answered a result: %+v", res)
	}
	msg := err.Error()
	t.Logf("the guest: %s", msg)
	if !strings.Contains(msg, "open read-write: done") {
		t.Fatalf("the guest did not get to the write: %v", err)
	}
	// The disk QEMU declares read-only is read-only to the guest's
	// kernel, whatever the guest's root does to its own flag.
	if strings.Contains(msg, "; write: done") || strings.Contains(msg, "write again: done") {
		t.Errorf("the guest's write to its root disk went through: %s", msg)
	}
	if after := fileSum(t, root); after != before {
		t.Errorf("the host's root image changed: sha256 %s, was %s", after, before)
	}
	left.check(t)
}

func fileSum(t *testing.T, name string) string {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}
