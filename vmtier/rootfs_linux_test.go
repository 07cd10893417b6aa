package vmtier

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/rootfs"
)

// tinyRoot is a prepared root of the host's static busybox (the
// shape `stockade rootfs build` makes: usr-merged, /etc, a sticky
// /var/tmp) with a marker file at its top, or a skip where the host has
// no static busybox (vmtest installs busybox-static).
func tinyRoot(t *testing.T, marker string) string {
	t.Helper()
	b, err := os.ReadFile("/bin/busybox")
	if err != nil || len(b) < 20 {
		t.Skip("no /bin/busybox (apt-get install busybox-static)")
	}
	root := filepath.Join(t.TempDir(), "root")
	for _, d := range []string{"usr/bin", "usr/lib", "usr/lib64", "etc", "var/tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	steps := []error{
		os.Chmod(filepath.Dir(root), 0o755), os.Chmod(root, 0o755),
		os.Chmod(filepath.Join(root, "var/tmp"), 0o777|os.ModeSticky),
		os.Symlink("usr/bin", filepath.Join(root, "bin")), os.Symlink("usr/lib", filepath.Join(root, "lib")),
		os.Symlink("usr/lib64", filepath.Join(root, "lib64")),
		os.WriteFile(filepath.Join(root, "usr/bin/busybox"), b, 0o755),
		os.WriteFile(filepath.Join(root, "vm-rootfs-marker"), []byte(marker), 0o644),
	}
	for _, applet := range []string{"sh", "cat", "touch", "echo"} {
		steps = append(steps, os.Symlink("busybox", filepath.Join(root, "usr/bin", applet)))
	}
	for _, err := range steps {
		if err != nil {
			t.Fatal(err)
		}
	}
	// A jail's root has a python3 (rootfs.Check): the host's, with the
	// libraries ldd names (without its standard library: sh runs here).
	py, err := filepath.EvalSymlinks(hostPython)
	if err != nil {
		t.Skip("no host python3")
	}
	libs, err := sharedLibs(py)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range append(libs, py) {
		dst := f
		if strings.HasPrefix(f, "/lib") {
			dst = "/usr" + f // lib and lib64 are usr-merge symlinks here
		}
		src, err := filepath.EvalSymlinks(f)
		if err == nil {
			err = os.MkdirAll(filepath.Join(root, filepath.Dir(dst)), 0o755)
		}
		if err == nil {
			err = copyFile(src, filepath.Join(root, dst), 0o755)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Base(py), filepath.Join(root, "usr/bin/python3")); err != nil {
		t.Fatal(err)
	}
	if ps := rootfs.Check(root); len(ps) > 0 {
		t.Skipf("busybox's root is no jail root here: %v", ps[0])
	}
	return root
}

// A vm run with --rootfs DIR: the guest's jail runs in DIR's tree (its
// image, the guest's second disk), sees DIR's marker, and cannot write
// its root.
func TestVMPreparedRootfs(t *testing.T) {
	o := needVM(t)
	marker := "marker " + newID()
	root := tinyRoot(t, marker)
	// DIR's image is the test's: removed with it.
	glob := filepath.Join(o.Cache, rootfsPrefix+"*"+rootSuffix)
	before, _ := filepath.Glob(glob)
	t.Cleanup(func() {
		now, _ := filepath.Glob(glob)
		for _, f := range now {
			if !slices.Contains(before, f) {
				os.Remove(f)
			}
		}
	})
	left := watch(&o)
	spec := vmSpec(t, "sh", "-c", "cat /vm-rootfs-marker; echo; touch /usr/bin/x 2>/dev/null && echo WRITABLE; test -d /usr/lib/python3.11 && echo HOST; echo end")
	spec.Rootfs = root
	res, err := runVM(t, spec, o)
	if err != nil || res.Verdict != jail.VerdictOK {
		t.Fatalf("verdict %s, err %v, stderr %q", res.Verdict, err, res.Stderr)
	}
	if want := marker + "\nend\n"; res.Stdout != want {
		t.Errorf("stdout %q, want %q: DIR's marker, no write to the root, not the host's Python's library", res.Stdout, want)
	}
	if now, _ := filepath.Glob(glob); len(now) != len(before)+1 {
		t.Errorf("images of prepared roots in the cache: %v, before the run %v: want DIR's added", now, before)
	}
	if strings.Contains(res.Stdout, "WRITABLE") {
		t.Error("the jail wrote to its root")
	}
	left.check(t)
}
