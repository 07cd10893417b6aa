package vmtier

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stockade/stockade/internal/testenv"
)

// TestAttackVMCacheOfAnotherUser: a local user plants an image in the vm
// cache another user's run will use (the cache when there is no $HOME is
// /tmp/stockade-vm-UID, a name anyone can make first; or a --cache both
// can write). The cache trusts a file by its name: the planted root would
// be the victim's guest's, handed the run's stdin and files. A cache that
// is another uid's, writable by others, or below a directory of another
// uid's is refused before anything in it is used; the user's own cache
// still serves its file (the control: the name the test plants is the
// one the cache looks for).
func TestAttackVMCacheOfAnotherUser(t *testing.T) {
	testenv.NeedRoot(t, "the attacker's cache is another uid's (chown)")
	const nobody = 65534
	base := t.TempDir()
	dir := filepath.Join(base, "prepared")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "payload"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	plant := func(t *testing.T, cache string) string {
		if err := os.MkdirAll(cache, 0o755); err != nil {
			t.Fatal(err)
		}
		name, _, _, err := rootfsImageName(cache, dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, []byte("the attacker's squashfs"), 0o644); err != nil {
			t.Fatal(err)
		}
		return name
	}
	for _, c := range []struct {
		name  string
		setup func(t *testing.T) string // the cache, with the image planted
		want  string                    // "" is the control: the planted file is found
	}{
		{"own", func(t *testing.T) string {
			c := filepath.Join(base, "own")
			plant(t, c)
			return c
		}, ""},
		{"another uid's", func(t *testing.T) string {
			c := filepath.Join(base, "theirs")
			plant(t, c)
			if err := os.Chown(c, nobody, nobody); err != nil {
				t.Fatal(err)
			}
			return c
		}, "belongs to uid 65534"},
		{"writable by others", func(t *testing.T) string {
			c := filepath.Join(base, "open")
			plant(t, c)
			if err := os.Chmod(c, 0o777); err != nil {
				t.Fatal(err)
			}
			return c
		}, "writable by others"},
		{"below another uid's", func(t *testing.T) string {
			p := filepath.Join(base, "parent")
			c := filepath.Join(p, "vm")
			plant(t, c)
			if err := os.Chown(p, nobody, nobody); err != nil {
				t.Fatal(err)
			}
			return c
		}, "belongs to uid 65534"},
		{"through a symlink of its own", func(t *testing.T) string {
			real := filepath.Join(base, "real")
			plant(t, filepath.Join(real, "vm"))
			link := filepath.Join(base, "link")
			if err := os.Symlink(real, link); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(link, "vm")
		}, ""},
		{"through another uid's symlink", func(t *testing.T) string {
			real := filepath.Join(base, "real2")
			plant(t, filepath.Join(real, "vm"))
			link := filepath.Join(base, "theirlink")
			if err := os.Symlink(real, link); err != nil {
				t.Fatal(err)
			}
			if err := os.Lchown(link, nobody, nobody); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(link, "vm")
		}, "the symlink"},
		{"to another uid's directory", func(t *testing.T) string {
			real := filepath.Join(base, "real3")
			plant(t, filepath.Join(real, "vm"))
			if err := os.Chown(real, nobody, nobody); err != nil {
				t.Fatal(err)
			}
			link := filepath.Join(base, "link3")
			if err := os.Symlink(real, link); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(link, "vm")
		}, "belongs to uid 65534"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cache := c.setup(t)
			got, err := EnsureRootfsImage(cache, dir)
			if c.want == "" {
				if err != nil || filepath.Dir(got) != filepath.Clean(cache) {
					t.Fatalf("own cache: %q, %v; want the planted file", got, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("the run attaches %s, a file of a cache another user can write", got)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not say %q", err, c.want)
			}
			t.Logf("refused: %v", err)
		})
	}
}

// TestAttackVMRootfsImageReadable: a local user reads a prepared root's
// secret through its vm image. DIR's 0600 file (a key the root's owner
// put there, in a DIR of mode 0700 others cannot enter) is packed into
// the image in the cache with its mode as metadata: an image others can
// read gives them the file's bytes (unsquashfs needs no permission of
// DIR's). The image is its owner's alone (0600), also one built before
// (made so when it is next used); QEMU gets it as a descriptor its jail's
// helper opens as root (TestVMPreparedRootfs boots from it).
func TestAttackVMRootfsImageReadable(t *testing.T) {
	testenv.NeedRoot(t, "DIR's file is root's and a jail root is checked as root's")
	if _, err := exec.LookPath("mksquashfs"); err != nil {
		t.Skip("no mksquashfs (apt-get install squashfs-tools)")
	}
	root := tinyRoot(t, "marker")
	if err := os.WriteFile(filepath.Join(root, "etc", "secret"), []byte("the key"), 0o600); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(t.TempDir(), "vm")
	img, err := EnsureRootfsImage(cache, root)
	if err != nil {
		t.Fatal(err)
	}
	mode := func() os.FileMode {
		fi, err := os.Stat(img)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode().Perm()
	}
	if m := mode(); m&0o077 != 0 {
		t.Errorf("the image of a root with a 0600 file is mode %#o: any local user reads the file out of it", m)
	}
	// An image built before the fix, found in the cache, is made private.
	if err := os.Chmod(img, 0o644); err != nil {
		t.Fatal(err)
	}
	if again, err := EnsureRootfsImage(cache, root); err != nil || again != img {
		t.Fatalf("again: %q, %v; want %q", again, err, img)
	}
	if m := mode(); m&0o077 != 0 {
		t.Errorf("the image found in the cache stays mode %#o", m)
	}
}
