package rootfs

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func mkTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, kind := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch {
		case kind == "dir":
			err = os.MkdirAll(full, 0o755)
		case kind == "file":
			err = os.WriteFile(full, []byte("x"), 0o644)
		case len(kind) > 3 && kind[:3] == "ln:":
			err = os.Symlink(kind[3:], full)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestHostEntriesUsrMerged(t *testing.T) {
	root := mkTree(t, map[string]string{
		"usr/bin": "dir", "bin": "ln:usr/bin", "lib": "ln:usr/lib", "lib64": "ln:usr/lib64",
		"etc/ld.so.cache": "file", "etc/localtime": "ln:/usr/share/zoneinfo/Etc/UTC",
		"etc/shadow": "file", "root": "dir", "home/alice": "dir",
	})
	got, err := hostEntries(root, append(append([]string{}, hostTop...), hostEtc...))
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{
		{Path: "/usr", Source: filepath.Join(root, "usr"), Dir: true},
		{Path: "/bin", Link: "usr/bin"},
		{Path: "/lib", Link: "usr/lib"},
		{Path: "/lib64", Link: "usr/lib64"},
		{Path: "/etc/ld.so.cache", Source: filepath.Join(root, "etc/ld.so.cache")},
		{Path: "/etc/localtime", Link: "/usr/share/zoneinfo/Etc/UTC"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("entries:\n got %+v\nwant %+v", got, want)
	}
}

func TestHostEntriesNeedUsr(t *testing.T) {
	root := mkTree(t, map[string]string{"bin": "dir"})
	if _, err := hostEntries(root, hostTop); err == nil {
		t.Fatal("a root without /usr was accepted")
	}
}

func TestDirSkipsWhatTheJailMounts(t *testing.T) {
	root := mkTree(t, map[string]string{
		"usr/bin": "dir", "etc/passwd": "file", "proc": "dir", "dev": "dir", "tmp": "dir",
		"work": "dir", "bin": "ln:usr/bin", "opt/app": "dir",
	})
	got, err := Dir(root)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, e := range got {
		paths = append(paths, e.Path)
	}
	want := []string{"/bin", "/etc", "/opt", "/usr"}
	if !reflect.DeepEqual(paths, want) {
		t.Fatalf("paths %v, want %v", paths, want)
	}
}

func TestDirRelativeRefused(t *testing.T) {
	if _, err := Dir("relative/root"); err == nil {
		t.Fatal("relative rootfs accepted")
	}
}
