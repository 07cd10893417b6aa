package jail

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

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
echo b > b; ln -s /etc/shadow link; ln -s b inlink; mkdir -p d1/d2; echo deep > d1/d2/x
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
		"inlink Lrwxrwxrwx", "keep drwxr-xr-x", "keep/k2 -rw-r--r-- kmore", "mod -rw------- m", "sub drwxr-xr-x", "sub/g -rw-r--r-- new"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("after the run:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var b, b2 syscall.Stat_t
	syscall.Stat(filepath.Join(dir, "b"), &b)
	syscall.Stat(filepath.Join(dir, "b2"), &b2)
	if b.Ino != b2.Ino {
		t.Errorf("a hard link in the jail came back as a copy")
	}
	if l, _ := os.Readlink(filepath.Join(dir, "inlink")); l != "b" {
		t.Errorf("inlink -> %q", l)
	}
	// A link out of DIR stays out (TestAttackCopyBackSymlinkOut).
	if r.CopyBack == nil || len(r.CopyBack.Skipped) != 1 || !strings.HasPrefix(r.CopyBack.Skipped[0], "link: ") {
		t.Errorf("copy_back %+v: want link -> /etc/shadow skipped", r.CopyBack)
	}
	if cb := r.CopyBack; cb == nil || cb.Files != 9 || cb.Deleted != 5 || cb.Bytes == 0 || cb.Stopped != nil || len(cb.Conflicts) != 0 {
		t.Errorf("copy_back %+v: want 9 entries written (b2 a link), 5 removed (a, sub/f, gone/x, gone, keep/k), some bytes, no conflict", cb)
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
// directory, as stockade does after a run, with a minute to do it.
func copyBackDir(t *testing.T, limit int64, fill func(upper string)) (string, error) {
	t.Helper()
	dst := t.TempDir()
	_, err := copyBackInto(t, dst, copyBackLimits{deadline: time.Now().Add(time.Minute), diskBytes: limit, entries: 1 << 20}, fill)
	return dst, err
}

// copyBackInto runs copyBack from an upper layer made by fill into dst
// within lim.
func copyBackInto(t *testing.T, dst string, lim copyBackLimits, fill func(upper string)) (*CopyBack, error) {
	t.Helper()
	seen, err := beginWorkSeen(dst)
	if err == nil {
		err = seen.settle(dst)
	}
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	upper := filepath.Join(root, "upper")
	if err := os.Mkdir(upper, 0o755); err != nil {
		t.Fatal(err)
	}
	fill(upper)
	fd, err := syscall.Open(root, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	return copyBack(fd, dst, seen, lim)
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
	r, err := runJail(t, s, Streams{})
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
	r, err := runJail(t, s, Streams{})
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

// TestCopyBackStopsAtDeadline: past its deadline copy-back applies
// nothing, removes what it staged, and says why.
func TestCopyBackStopsAtDeadline(t *testing.T) {
	testenv.NeedRoot(t, "makes a whiteout (a 0/0 character device)")
	dst := t.TempDir()
	if err := os.WriteFile(filepath.Join(dst, "old"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	cb, err := copyBackInto(t, dst, copyBackLimits{deadline: time.Now(), entries: 1 << 20}, func(upper string) {
		for i := range 200 {
			os.WriteFile(filepath.Join(upper, fmt.Sprintf("f%03d", i)), []byte("new"), 0o644)
		}
		if err := syscall.Mknod(filepath.Join(upper, "old"), syscall.S_IFCHR, 0); err != nil {
			t.Fatal(err)
		}
	})
	if err == nil || !strings.Contains(err.Error(), "deadline") || !strings.Contains(err.Error(), "unchanged") {
		t.Errorf("copyBack: %v, want it stopped at the deadline, DIR unchanged", err)
	}
	if cb.Stopped == nil || cb.Files != 0 || cb.Deleted != 0 {
		t.Errorf("report %+v: want stopped, nothing applied", cb)
	}
	names, _ := os.ReadDir(dst)
	if b, _ := os.ReadFile(filepath.Join(dst, "old")); len(names) != 1 || string(b) != "old" {
		t.Errorf("DIR holds %d names, old %q: want only old, as it was", len(names), b)
	}
}

// TestAttackCopyBackSetID: what the jail leaves with a set-id or sticky
// bit (overlay copies a file up with its mode) comes back without it,
// owned by DIR's owner and group.
func TestAttackCopyBackSetID(t *testing.T) {
	testenv.NeedRoot(t, "chowns to another user")
	dst := t.TempDir()
	if err := os.Chown(dst, 4242, 4243); err != nil {
		t.Fatal(err)
	}
	_, err := copyBackInto(t, dst, copyBackLimits{deadline: time.Now().Add(time.Minute), entries: 1 << 20}, func(upper string) {
		for name, mode := range map[string]os.FileMode{"suid": os.ModeSetuid | os.ModeSetgid | 0o755, "sgid": os.ModeDir | os.ModeSetgid | 0o775, "tmp": os.ModeDir | os.ModeSticky | 0o777} {
			p := filepath.Join(upper, name)
			if mode.IsDir() {
				os.Mkdir(p, 0o700)
				os.WriteFile(filepath.Join(p, "f"), []byte("f"), 0o644)
			} else {
				os.WriteFile(p, []byte("x"), 0o700)
			}
			if err := os.Chmod(p, mode); err != nil {
				t.Fatal(err)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"suid": "-rwxr-xr-x", "sgid": "drwxrwxr-x", "tmp": "drwxrwxrwx", "sgid/f": "-rw-r--r--", "tmp/f": "-rw-r--r--"}
	for name, mode := range want {
		fi, err := os.Lstat(filepath.Join(dst, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode().String() != mode || st.Uid != 4242 || st.Gid != 4243 {
			t.Errorf("%s: %v %d:%d, want %s 4242:4243", name, fi.Mode(), st.Uid, st.Gid, mode)
		}
	}
}

// A run that changed nothing leaves DIR as it was, its times included
// (no staging directory made and removed: a build tool would see DIR
// modified).
func TestCopyBackOfNothingTouchesNothing(t *testing.T) {
	dst := t.TempDir()
	var before, after syscall.Stat_t
	if err := syscall.Stat(dst, &before); err != nil {
		t.Fatal(err)
	}
	cb, err := copyBackInto(t, dst, copyBackLimits{deadline: time.Now().Add(time.Minute), entries: 1 << 20}, func(string) {})
	if err != nil || cb.Files != 0 || cb.Deleted != 0 || cb.Stopped != nil {
		t.Fatalf("copyBack: %v %+v", err, cb)
	}
	syscall.Stat(dst, &after)
	if before.Mtim != after.Mtim || before.Ctim != after.Ctim || before.Nlink != after.Nlink {
		t.Errorf("DIR's times or links changed: %+v, was %+v", after, before)
	}
}

// Copy-back has what --timeout left of the run, and copyBackGrace when
// that is less.
func TestCopyBackLimitsFor(t *testing.T) {
	now := time.Unix(1000, 0)
	s := testSpec("true")
	for _, tc := range []struct {
		runEnds, want time.Time
	}{
		{now.Add(time.Minute), now.Add(time.Minute)},
		{now.Add(time.Second), now.Add(copyBackGrace)},
		{now.Add(-time.Second), now.Add(copyBackGrace)}, // the run timed out
		{time.Time{}, now.Add(copyBackGrace)},           // it never started
	} {
		lim := copyBackLimitsFor(s, tc.runEnds, now)
		if !lim.deadline.Equal(tc.want) {
			t.Errorf("run ends %v: deadline %v, want %v", tc.runEnds, lim.deadline, tc.want)
		}
		if lim.diskBytes != s.WorkSize || lim.entries != int(WorkInodes(s.WorkSize))+maxDeleteEntries {
			t.Errorf("limits %+v: want --work-size and the layer's inodes plus %d", lim, maxDeleteEntries)
		}
	}
}
