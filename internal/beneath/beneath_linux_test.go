package beneath

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// hostile builds a tree below a fresh directory from lines "d NAME" (a
// directory), "f NAME DATA" (a file), "l NAME TARGET" (a symlink), "p
// NAME" (a FIFO), "c NAME" (a character device, /dev/null's; root only).
// A target "OUT" is a directory outside the tree holding a file "secret".
func hostile(t *testing.T, lines ...string) (root int, dir, out string) {
	t.Helper()
	dir, out = t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(out, "secret"), []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		kind, rest, _ := strings.Cut(l, " ")
		name, arg, _ := strings.Cut(rest, " ")
		p := filepath.Join(dir, name)
		var err error
		switch kind {
		case "d":
			err = os.MkdirAll(p, 0o755)
		case "f":
			err = os.WriteFile(p, []byte(arg), 0o640)
		case "l":
			err = os.Symlink(strings.ReplaceAll(arg, "OUT", out), p)
		case "p":
			err = unix.Mkfifo(p, 0o644)
		case "c":
			if os.Geteuid() != 0 {
				t.Skip("a device node needs root")
			}
			err = unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3)))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	root, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(root) })
	return root, dir, out
}

// Every open below the top refuses a symlink at any level of the path,
// the last included, and a path that leaves the top.
func TestOpenRefusesSymlinksAtEveryLevel(t *testing.T) {
	tree := []string{"d a/b/c", "f a/b/c/f x", "l la OUT", "l a/lb OUT", "l a/b/lc OUT", "l a/b/c/lf OUT/secret",
		"l a/b/rel ../..", "l a/b/c/self c"}
	for _, tc := range []struct {
		path string
		want error // nil: opens
	}{
		{"a/b/c/f", nil},
		{"la/secret", unix.ELOOP},
		{"a/lb/secret", unix.ELOOP},
		{"a/b/lc/secret", unix.ELOOP},
		{"a/b/c/lf", unix.ELOOP},
		{"la", unix.ELOOP},
		{"a/b/rel/a/b/c/f", unix.ELOOP}, // a relative link that stays inside is still a link
		{"a/b/c/self", unix.ELOOP},
		{"../x", unix.EXDEV},
		{"a/../../x", unix.EXDEV},
		{"/etc/passwd", unix.EXDEV},
	} {
		t.Run(tc.path, func(t *testing.T) {
			root, _, _ := hostile(t, tree...)
			fd, st, err := OpenFile(root, tc.path)
			if fd >= 0 {
				unix.Close(fd)
			}
			if !errors.Is(err, tc.want) && !(tc.want == nil && err == nil) {
				t.Errorf("OpenFile: %v, want %v", err, tc.want)
			}
			if tc.want == nil && st.Mode&unix.S_IFMT != unix.S_IFREG {
				t.Errorf("OpenFile opened mode %o", st.Mode)
			}
			if tc.want == nil {
				return
			}
			// A directory open says ELOOP of a symlink too (O_DIRECTORY
			// alone would say ENOTDIR of a trailing one).
			if fd, err := OpenDir(root, tc.path); !errors.Is(err, tc.want) && !errors.Is(err, unix.ENOTDIR) && !errors.Is(err, unix.ENOENT) {
				unix.Close(fd)
				t.Errorf("OpenDir: %v, want %v", err, tc.want)
			}
		})
	}
	root, _, _ := hostile(t, tree...)
	for _, p := range []string{"la", "a/lb", "a/b/lc"} {
		if _, err := OpenDir(root, p); !errors.Is(err, unix.ELOOP) {
			t.Errorf("OpenDir %s (a symlink to a directory): %v, want ELOOP", p, err)
		}
	}
}

// A FIFO or device opened to be read is not waited on, and says what it
// is; a write never replaces one, nor a directory, nor a symlink.
func TestFifosAndDevicesAreNotFiles(t *testing.T) {
	root, dir, out := hostile(t, "p fifo", "c null", "d sub", "l link OUT/secret")
	for _, name := range []string{"fifo", "null"} {
		fd, st, err := OpenFile(root, name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		unix.Close(fd)
		if st.Mode&unix.S_IFMT == unix.S_IFREG {
			t.Errorf("%s: opened as a regular file", name)
		}
	}
	for _, tc := range []struct {
		name string
		want error
	}{{"fifo", ErrNotRegular}, {"null", ErrNotRegular}, {"sub", ErrNotRegular}, {"link", unix.ELOOP}} {
		if _, err := WriteFile(root, tc.name, strings.NewReader("x"), ".tmp-"); !errors.Is(err, tc.want) {
			t.Errorf("WriteFile %s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(out, "secret")); string(b) != "host" {
		t.Errorf("the file outside is now %q", b)
	}
	leftover(t, dir, ".tmp-")
}

// leftover fails if a name beginning with prefix is left anywhere below dir.
func leftover(t *testing.T, dir, prefix string) {
	t.Helper()
	_ = filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error {
		if strings.HasPrefix(filepath.Base(p), prefix) {
			t.Errorf("a temporary file is left: %s", p)
		}
		return nil
	})
}

// WriteFile makes the directories, keeps a file's permissions, writes
// names of any bytes, never writes through a symlinked parent, and a write
// cut halfway leaves the target as it was.
func TestWriteFile(t *testing.T) {
	root, dir, out := hostile(t, "f old before", "l up OUT", "d x")
	if err := os.Chmod(filepath.Join(dir, "old"), 0o600); err != nil {
		t.Fatal(err)
	}
	odd := "new\nline/\xff\xfe-not-utf8"
	for _, p := range []string{"old", odd, "deep/er/file"} {
		if n, err := WriteFile(root, p, strings.NewReader("data"), ".tmp-"); err != nil || n != 4 {
			t.Fatalf("WriteFile %q: %d %v", p, n, err)
		}
		if b, err := os.ReadFile(filepath.Join(dir, p)); err != nil || string(b) != "data" {
			t.Errorf("%q reads %q %v", p, b, err)
		}
	}
	if st, _ := os.Stat(filepath.Join(dir, "old")); st.Mode().Perm() != 0o600 {
		t.Errorf("old's mode is now %v", st.Mode())
	}
	if _, err := WriteFile(root, "up/secret", strings.NewReader("owned"), ".tmp-"); !errors.Is(err, unix.ELOOP) {
		t.Errorf("through a symlinked parent: %v, want ELOOP", err)
	}
	if _, err := WriteFile(root, "up/new", strings.NewReader("owned"), ".tmp-"); !errors.Is(err, unix.ELOOP) {
		t.Errorf("a new file through a symlinked parent: %v, want ELOOP", err)
	}
	if _, err := os.Stat(filepath.Join(out, "new")); err == nil {
		t.Error("a file was made outside")
	}
	cut := io.MultiReader(strings.NewReader("half"), errReader{})
	if _, err := WriteFile(root, "old", cut, ".tmp-"); err == nil {
		t.Error("a cut write succeeded")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "old")); string(b) != "data" {
		t.Errorf("a cut write left old as %q", b)
	}
	leftover(t, dir, ".tmp-")
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("cut") }

// MkdirAll makes each missing component beneath the one before, says
// which it made, and stops at a symlink; a tree deeper than PATH_MAX is
// made and walked, since no call takes more than one component.
func TestMkdirAllAndDeepTrees(t *testing.T) {
	root, _, out := hostile(t, "d a", "l a/link OUT")
	var made []string
	fd, err := MkdirAll(root, "a/b/c", unix.O_PATH, 0o755, func(p string) { made = append(made, p) })
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	if strings.Join(made, ",") != "a/b,a/b/c" {
		t.Errorf("made %v, want a/b and a/b/c", made)
	}
	if _, err := MkdirAll(root, "a/link/x", unix.O_PATH, 0o755, nil); !errors.Is(err, unix.ELOOP) {
		t.Errorf("through a symlink: %v, want ELOOP", err)
	}
	if _, err := os.Stat(filepath.Join(out, "x")); err == nil {
		t.Error("a directory was made outside")
	}
	// 40 components of 200 bytes: 8 KB, twice PATH_MAX.
	deep := strings.TrimSuffix(strings.Repeat(strings.Repeat("d", 200)+"/", 40), "/")
	fd, err = MkdirAll(root, deep, unix.O_RDONLY, 0o755, nil)
	if err != nil {
		t.Fatalf("a tree deeper than PATH_MAX: %v", err)
	}
	if err := unix.Mkfifo(filepath.Join("/proc/self/fd", strconv.Itoa(fd), "bottom"), 0o644); err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	var bottom string
	depth := 0
	(&Walk{MaxEntries: 1000, Visit: func(p string, d int, e Entry) Step {
		if e.Name == "bottom" {
			bottom, depth = p, d
		}
		if e.Type() == unix.S_IFDIR {
			return Descend
		}
		return Next
	}, Failed: func(dir string, err error) Step { t.Errorf("%.40s...: %v", dir, err); return Next }, Cut: func(string) {}}).Run(root)
	if bottom != deep+"/bottom" || depth != 40 {
		t.Errorf("the walk's bottom: %d levels, %d bytes", depth, len(bottom))
	}
	if err := RemoveAll(root, "a", 100); err != nil {
		t.Errorf("RemoveAll: %v", err)
	}
	if err := RemoveAll(root, "d"+strings.Repeat("d", 199), 10); !errors.Is(err, ErrTooDeep) {
		t.Errorf("RemoveAll past its levels: %v, want ErrTooDeep", err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "secret")); string(b) != "host" {
		t.Errorf("the file outside is now %q", b)
	}
}

// A walk lists names of any bytes as they are, in order, descends only
// where asked, never through a directory swapped for a symlink while it
// walks, and looks at no more entries than its cap.
func TestWalkHostileTrees(t *testing.T) {
	root, dir, out := hostile(t, "d a/b", "f a/b/f x", "f nl\nname x", "f \xff\xfe x", "l ln OUT", "p fifo", "d z")
	var seen []string
	var failed []string
	w := &Walk{MaxEntries: 100}
	w.Visit = func(p string, depth int, e Entry) Step {
		seen = append(seen, p)
		if p == "a" {
			// Swap a for a symlink to the outside just before the walk
			// goes in: it must refuse, not follow.
			if err := os.Rename(filepath.Join(dir, "a"), filepath.Join(dir, "a.old")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(out, filepath.Join(dir, "a")); err != nil {
				t.Fatal(err)
			}
		}
		if e.Type() == unix.S_IFDIR {
			return Descend
		}
		return Next
	}
	w.Failed = func(d string, err error) Step {
		if !errors.Is(err, unix.ELOOP) {
			t.Errorf("%s: %v, want ELOOP", d, err)
		}
		failed = append(failed, d)
		return Next
	}
	w.Cut = func(d string) { t.Errorf("cut at %s with room for 100", d) }
	w.Run(root)
	want := "a|fifo|ln|nl\nname|z|\xff\xfe"
	if strings.Join(seen, "|") != want {
		t.Errorf("visited %q, want %q", strings.Join(seen, "|"), want)
	}
	if strings.Join(failed, "|") != "a" {
		t.Errorf("failed %q, want a (swapped for a symlink)", failed)
	}

	// The cap: 3 entries looked at, the rest said to be cut.
	root, _, _ = hostile(t, "d a", "f a/1 x", "f a/2 x", "f b x", "f c x")
	var cut []string
	seen = nil
	w = &Walk{MaxEntries: 3, Failed: func(string, error) Step { return Next }, Cut: func(d string) { cut = append(cut, d) }}
	w.Visit = func(p string, depth int, e Entry) Step {
		seen = append(seen, p)
		if e.Type() == unix.S_IFDIR {
			return Descend
		}
		return Next
	}
	w.Run(root)
	if len(seen) != 3 || strings.Join(cut, "|") != "a" {
		t.Errorf("with a cap of 3: visited %q, cut %q", seen, cut)
	}
}

// List says each entry's type without following it, and more when there
// were others; Remove removes a symlink itself.
func TestListAndRemove(t *testing.T) {
	root, _, out := hostile(t, "d d", "f f abc", "l l OUT/secret", "p p")
	entries, more, err := List(root, ".", 10)
	if err != nil || more || len(entries) != 4 {
		t.Fatalf("List: %v %v %v", entries, more, err)
	}
	types := map[string]uint32{"d": unix.S_IFDIR, "f": unix.S_IFREG, "l": unix.S_IFLNK, "p": unix.S_IFIFO}
	for _, e := range entries {
		if e.Type() != types[e.Name] {
			t.Errorf("%s: type %o", e.Name, e.Type())
		}
	}
	if entries, more, _ := List(root, ".", 2); len(entries) != 2 || !more {
		t.Errorf("List of 2: %d entries, more %v", len(entries), more)
	}
	if _, _, err := List(root, "l", 10); !errors.Is(err, unix.ELOOP) {
		t.Errorf("List through a symlink: %v", err)
	}
	if err := Remove(root, "l"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "secret")); string(b) != "host" {
		t.Errorf("removing the link touched its target: %q", b)
	}
}
