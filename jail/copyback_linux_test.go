package jail

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
)

// A --workdir run's writes land in the overlay's upper layer and are
// copied back after the run: what the jail did must be what the directory
// shows, with the jail user's ownership and no set-id bits.
func TestWorkdirWritesAreCopiedBack(t *testing.T) {
	needJail(t)
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
