package vmtier

import (
	"os"
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
