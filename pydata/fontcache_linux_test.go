package pydata

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, v := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		if l, ok := strings.CutPrefix(v, "ln:"); ok {
			err = os.Symlink(l, full)
		} else {
			err = os.WriteFile(full, []byte(v), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestKeyFollowsPythonMatplotlibAndFonts(t *testing.T) {
	root := tree(t, map[string]string{
		"usr/bin/python3": "ln:python3.11", "usr/bin/python3.11": "elf",
		"usr/lib/python3/dist-packages/matplotlib/__init__.py": "3.6.3",
		"usr/share/fonts/truetype/dejavu/DejaVuSans.ttf":       "font",
	})
	k1, ok, err := fontCacheKey(root)
	if err != nil || !ok || !strings.HasPrefix(k1, "python3.11-") {
		t.Fatalf("Key = %q %v %v", k1, ok, err)
	}
	if k, _, _ := fontCacheKey(root); k != k1 {
		t.Fatalf("Key not stable: %s then %s", k1, k)
	}
	// A font installed: the font directory changes, and so does the key.
	os.MkdirAll(filepath.Join(root, "usr/share/fonts/truetype/lyx"), 0o755)
	k2, _, _ := fontCacheKey(root)
	if k2 == k1 {
		t.Fatal("a new font directory did not change the key")
	}
	// matplotlib upgraded.
	os.WriteFile(filepath.Join(root, "usr/lib/python3/dist-packages/matplotlib/__init__.py"), []byte("3.7.0 and more"), 0o644)
	if k3, _, _ := fontCacheKey(root); k3 == k2 {
		t.Fatal("a new matplotlib did not change the key")
	}
	if _, ok, err := fontCacheKey(tree(t, map[string]string{"usr/bin/python3": "elf"})); ok || err != nil {
		t.Fatalf("a root without matplotlib: ok %v, err %v", ok, err)
	}
}

func TestStoreThenLookup(t *testing.T) {
	base := filepath.Join(t.TempDir(), "matplotlib")
	if _, ok, err := lookupFontCache(base, "k"); ok || err != nil {
		t.Fatalf("empty base: ok %v err %v", ok, err)
	}
	files, err := parseFontCache([]byte(`{"fontlist-v330.json": "{\"_version\": 330, \"ttflist\": []}"}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := storeFontCache(base, "k", files); err != nil {
		t.Fatal(err)
	}
	if err := storeFontCache(base, "k", files); err != nil { // a concurrent builder lost the race
		t.Fatal(err)
	}
	got, ok, err := lookupFontCache(base, "k")
	if err != nil || !ok || len(got) != 1 || got[0] != "fontlist-v330.json" {
		t.Fatalf("Lookup = %v %v %v", got, ok, err)
	}
	fi, _ := os.Stat(filepath.Join(base, "k", "fontlist-v330.json"))
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("cache file mode %v", fi.Mode())
	}
	left, _ := filepath.Glob(filepath.Join(base, ".new-*"))
	if len(left) != 0 {
		t.Errorf("staging left behind: %v", left)
	}
}

// TestAttackPoisonedCacheIsNotUsed: a cache directory or file that others
// can write (planted, or loosened after the fact) is refused, never bound.
func TestAttackPoisonedCacheIsNotUsed(t *testing.T) {
	for name, loosen := range map[string]func(base string) error{
		"group-writable file": func(b string) error { return os.Chmod(filepath.Join(b, "k", "fontlist-v330.json"), 0o666) },
		"world-writable dir":  func(b string) error { return os.Chmod(filepath.Join(b, "k"), 0o777) },
		"symlinked dir": func(b string) error {
			os.Rename(filepath.Join(b, "k"), filepath.Join(b, "real"))
			return os.Symlink("real", filepath.Join(b, "k"))
		},
		"extra file": func(b string) error { return os.WriteFile(filepath.Join(b, "k", "evil.py"), nil, 0o644) },
	} {
		t.Run(name, func(t *testing.T) {
			base := t.TempDir()
			files, _ := parseFontCache([]byte(`{"fontlist-v330.json": "{}"}`))
			if err := storeFontCache(base, "k", files); err != nil {
				t.Fatal(err)
			}
			if err := loosen(base); err != nil {
				t.Fatal(err)
			}
			if _, ok, err := lookupFontCache(base, "k"); ok || err == nil {
				t.Fatalf("a %s was accepted (ok %v, err %v)", name, ok, err)
			}
		})
	}
}

func TestParseRefusesWhatIsNotAFontList(t *testing.T) {
	for _, out := range []string{
		``, `[]`, `{}`, `{"../../etc/passwd": "{}"}`, `{"fontlist-v330.json": "not json"}`,
		`{"fontlist-v330.json/../x": "{}"}`, `{"fontlist-v330.json": "[1]"}`,
	} {
		if _, err := parseFontCache([]byte(out)); err == nil {
			t.Errorf("parseFontCache(%q) accepted", out)
		}
	}
}

// The lock is a file only this user can open: one that others could open
// (a mode that lets them, a symlink planted in its place) is refused
// rather than waited on, and the base stays lockable by the owner alone.
func TestLockIsAFileOnlyTheOwnerCanOpen(t *testing.T) {
	base := filepath.Join(t.TempDir(), "matplotlib")
	unlock, err := lockFontCache(base)
	if err != nil {
		t.Fatal(err)
	}
	unlock()
	fi, err := os.Lstat(filepath.Join(base, lockName))
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Fatalf("lock file: %v %v, want a regular file 0600", fi, err)
	}
	os.Chmod(filepath.Join(base, lockName), 0o644)
	if _, err := lockFontCache(base); err == nil {
		t.Error("a lock file others can open was used")
	}
	os.Remove(filepath.Join(base, lockName))
	os.Symlink("/etc/passwd", filepath.Join(base, lockName))
	if _, err := lockFontCache(base); err == nil {
		t.Error("a symlink in the lock file's place was followed")
	}
}

// fileName is `^fontlist-v[0-9]{1,6}\.json$`, written as a loop.
func TestFileName(t *testing.T) {
	for name, want := range map[string]bool{
		"fontlist-v330.json": true, "fontlist-v1.json": true, "fontlist-v123456.json": true,
		"fontlist-v1234567.json": false, "fontlist-v.json": false, "fontlist-v33a.json": false,
		"fontlist-v330.json.tmp": false, "xfontlist-v330.json": false, "fontlist-v330json": false,
		"fontlist-v-1.json": false, "fontlist-v330.JSON": false, "": false,
	} {
		if got := fileName(name); got != want {
			t.Errorf("fileName(%q) = %v, want %v", name, got, want)
		}
	}
}
