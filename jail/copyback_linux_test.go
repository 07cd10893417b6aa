package jail

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/stockade/stockade/internal/testenv"
)

// A --workdir run's writes land in the overlay's upper layer and are
// copied back after the run: what the jail did must be what the directory
// shows, with the jail user's ownership and no set-id bits.
func TestWorkdirWritesAreCopiedBack(t *testing.T) {
	testenv.NeedJail(t)
	if !tmpfsUserXattrs() {
		// Overlay keeps its opaque mark in a user xattr of the upper
		// tmpfs; without one, removing and remaking a directory of DIR
		// fails with EIO in the jail (the rest works).
		t.Skip("tmpfs has no user xattrs before Linux 6.6: overlay cannot replace a directory of --workdir")
	}
	dir := ownedTempDir(t)
	for name, data := range map[string]string{"a": "old", "sub/f": "s", "keep/k": "k", "gone/x": "g", "mod": "m"} {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(data), 0o644)
	}
	if os.Geteuid() == 0 {
		filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, 4242, 4242) })
	}
	s := spec("sh", "-c", `set -e
rm a; rm -r sub gone; mkdir sub; echo new > sub/g
echo b > b; ln -s /etc/shadow link; mkdir -p d1/d2; echo deep > d1/d2/x
echo more >> keep/k; mv keep/k keep/k2; chmod 600 mod; ln b b2`)
	s.Workdir = dir
	r := mustRun(t, s)
	if r.Verdict != VerdictOK {
		t.Fatalf("%+v", r)
	}
	var got []string
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		st := fi.Sys().(*syscall.Stat_t)
		entry := rel + " " + fi.Mode().String()
		if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			entry += " " + strings.TrimSpace(string(b))
			if os.Geteuid() == 0 && st.Uid != 4242 {
				t.Errorf("%s: owned by uid %d, want the directory's owner", rel, st.Uid)
			}
		}
		got = append(got, entry)
		return nil
	})
	sort.Strings(got)
	want := []string{"b -rw-r--r-- b", "b2 -rw-r--r-- b", "d1 drwxr-xr-x", "d1/d2 drwxr-xr-x", "d1/d2/x -rw-r--r-- deep",
		"keep drwxr-xr-x", "keep/k2 -rw-r--r-- kmore", "link Lrwxrwxrwx", "mod -rw------- m", "sub drwxr-xr-x", "sub/g -rw-r--r-- new"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("after the run:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var b, b2 syscall.Stat_t
	syscall.Stat(filepath.Join(dir, "b"), &b)
	syscall.Stat(filepath.Join(dir, "b2"), &b2)
	if b.Ino != b2.Ino {
		t.Errorf("a hard link in the jail came back as a copy")
	}
	if l, _ := os.Readlink(filepath.Join(dir, "link")); l != "/etc/shadow" {
		t.Errorf("link -> %q", l)
	}
}

// tmpfsUserXattrs reports whether this kernel's tmpfs takes user.*
// extended attributes (Linux 6.6).
func tmpfsUserXattrs() bool {
	var u syscall.Utsname
	if syscall.Uname(&u) != nil {
		return false
	}
	var rel []byte
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		rel = append(rel, byte(c))
	}
	var major, minor int
	fmt.Sscanf(string(rel), "%d.%d", &major, &minor)
	return major > 6 || major == 6 && minor >= 6
}

// copyBackDir runs copyBack from an upper layer made by fill into a fresh
// directory, as stockade does after a run.
func copyBackDir(t *testing.T, limit int64, fill func(upper string)) (string, error) {
	t.Helper()
	root := t.TempDir()
	upper := filepath.Join(root, "upper")
	if err := os.Mkdir(upper, 0o755); err != nil {
		t.Fatal(err)
	}
	fill(upper)
	dst := t.TempDir()
	fd, err := syscall.Open(root, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	return dst, copyBack(fd, dst, os.Getuid(), os.Getgid(), limit)
}

// TestAttackCopyBackFileBomb: thousands of empty files, made in moments
// in the jail, are copied back by stockade outside the run's cgroup and
// timeout. A fresh 1 MiB buffer per file made 64,000 of them cost 38 s of
// CPU; one reused buffer, and none touched for an empty file, keeps the
// copy's allocations far below one buffer per file.
func TestAttackCopyBackFileBomb(t *testing.T) {
	const files = 2000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	dst, err := copyBackDir(t, 1<<30, func(upper string) {
		for i := range files {
			if err := os.WriteFile(filepath.Join(upper, fmt.Sprintf("f%d", i)), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		os.WriteFile(filepath.Join(upper, "data"), []byte("kept"), 0o600)
	})
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	// Test files and the copy together; a buffer per file alone is 2 GiB.
	if got := after.TotalAlloc - before.TotalAlloc; got > 64<<20 {
		t.Errorf("copying back %d empty files allocated %d MiB, want far less than a buffer per file", files, got>>20)
	}
	names, _ := os.ReadDir(dst)
	if b, _ := os.ReadFile(filepath.Join(dst, "data")); len(names) != files+1 || string(b) != "kept" {
		t.Errorf("copied back %d names, data %q: want %d and %q", len(names), b, files+1, "kept")
	}
}

// TestAttackCopyBackTwiceWorkSize: an empty directory costs the upper
// tmpfs an inode and no block, but the host a block each; filling the data
// and then every inode with directories made the copy-back write twice
// --work-size to the host. The copy is refused whole, with the reason.
func TestAttackCopyBackTwiceWorkSize(t *testing.T) {
	testenv.NeedJail(t)
	dir := ownedTempDir(t)
	s := py(`
import os
with open("fill", "wb") as f:
    try:
        while True: f.write(b"x" * 65536); f.flush()
    except OSError: pass
n = 0
while True:
    try:
        os.mkdir("d%05d" % n); n += 1
    except OSError:
        break
print("dirs", n)
`)
	s.WorkSize = 4 << 20
	s.Workdir = dir
	r, err := Run(context.Background(), s, Streams{})
	if err == nil || !strings.Contains(err.Error(), "more than --work-size") || !strings.Contains(err.Error(), "nothing was copied back") {
		t.Errorf("Run: %v, want copy-back refused for --work-size (%+v)", err, r)
	}
	if r != nil && r.Verdict != VerdictError {
		t.Errorf("verdict %q, want %q", r.Verdict, VerdictError)
	}
	if used, _ := diskUse(t, dir); used > s.WorkSize {
		t.Errorf("--workdir holds %d bytes after the run, more than --work-size %d", used, s.WorkSize)
	}
	if names, _ := os.ReadDir(dir); len(names) != 0 {
		t.Errorf("%d names copied back, want none", len(names))
	}
	// Within the bound, the same directories and a little data come back.
	dst, err := copyBackDir(t, 1<<20, func(upper string) {
		for i := range 100 {
			os.Mkdir(filepath.Join(upper, fmt.Sprintf("d%d", i)), 0o755)
		}
		os.WriteFile(filepath.Join(upper, "f"), make([]byte, 100<<10), 0o600)
	})
	if names, _ := os.ReadDir(dst); err != nil || len(names) != 101 {
		t.Errorf("within the bound: %v, %d names", err, len(names))
	}
}

// TestAttackCopyBackDeepTree: a tree deeper than copy-back goes used to
// fail it half-applied (what readdir listed first copied, the rest lost,
// 1,025 levels left on the host). The upper layer is checked first: a too
// deep tree copies nothing and says why, briefly.
func TestAttackCopyBackDeepTree(t *testing.T) {
	testenv.NeedJail(t)
	dir := ownedTempDir(t)
	s := py(`
import os
open("result.txt", "w").write("the answer\n")
os.mkdir("deep"); os.chdir("deep")
for i in range(1100):
    os.mkdir("a"); os.chdir("a")
print("made 1100 levels")
`)
	s.Workdir = dir
	r, err := Run(context.Background(), s, Streams{})
	if err == nil || !strings.Contains(err.Error(), "deeper than") || !strings.Contains(err.Error(), "nothing was copied back") {
		t.Errorf("Run: %v, want copy-back refused for depth (%+v)", err, r)
	}
	if err != nil && len(err.Error()) > 400 {
		t.Errorf("error is %d bytes long, want a short message", len(err.Error()))
	}
	if r != nil && (r.Verdict != VerdictError || !strings.Contains(r.Stdout, "made 1100 levels")) {
		t.Errorf("verdict %q stdout %q: want %q after the jail's own run", r.Verdict, r.Stdout, VerdictError)
	}
	if names, _ := os.ReadDir(dir); len(names) != 0 {
		t.Errorf("%d names copied back, want none", len(names))
	}
	// The time stockade spent is in the result of a run that copies.
	s = spec("sh", "-c", "echo x > f")
	s.Workdir = dir
	if r := mustRun(t, s); r.Verdict != VerdictOK || r.CopyBackMs <= 0 {
		t.Errorf("verdict %q, copy_back_ms %v: want ok and the time", r.Verdict, r.CopyBackMs)
	}
}
