package jail

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stockade/stockade/internal/testenv"
	"golang.org/x/sys/unix"
)

// pausedScript wraps a shell script for runPaused: the jail says it is
// ready on stdout, then waits for a line on stdin before it goes on.
func pausedScript(before, after string) Spec {
	return spec("sh", "-c", before+"\necho READY\nread go\n"+after)
}

// runPaused runs s (made by pausedScript) and calls during while the jail
// waits, after it has done its first part: what the host does to DIR
// during a run, in a fixed order with the jail's own steps.
func runPaused(t *testing.T, s Spec, during func()) (*Result, error) {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer inR.Close()
	ready := &readyWriter{seen: make(chan struct{})}
	type ran struct {
		r   *Result
		err error
	}
	done := make(chan ran, 1)
	ctx, cancel := jailContext(t, s)
	defer cancel()
	go func() {
		r, err := Run(ctx, s, Streams{Stdin: inR, Stdout: ready})
		done <- ran{r, err}
	}()
	select {
	case <-ready.seen:
	case r := <-done:
		inW.Close()
		t.Fatalf("the jail ended before it was ready: %v %+v", r.err, r.r)
	case <-time.After(30 * time.Second):
		inW.Close()
		t.Fatal("the jail did not say it was ready within 30 s")
	}
	during()
	inW.Write([]byte("go\n"))
	inW.Close()
	select {
	case r := <-done:
		return r.r, r.err
	case <-time.After(60 * time.Second):
		t.Fatal("the run did not end within 60 s of being let go")
		return nil, nil
	}
}

// readyWriter closes seen when the stream says READY.
type readyWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	seen chan struct{}
	once sync.Once
}

func (w *readyWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(b)
	if strings.Contains(w.buf.String(), "READY\n") {
		w.once.Do(func() { close(w.seen) })
	}
	return len(b), nil
}

// writeTree makes the files of tree (path: content) below dir, owned by
// the directory's owner as a user's would be.
func writeTree(t *testing.T, dir string, tree map[string]string) {
	t.Helper()
	for name, data := range tree {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(name, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if os.Geteuid() == 0 {
		filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, 4242, 4242) })
	}
}

// treeOf lists dir as "path kind content", sorted, to compare before and
// after a run: content for files, the target for links.
func treeOf(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		e := rel + " " + fi.Mode().String()
		switch {
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			e += fmt.Sprintf(" %q", b)
		case fi.Mode()&os.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			e += " -> " + l
		}
		out = append(out, e)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// TestAttackCopyBackDeletesHostAdditions: the jail deleted /work/sub
// (holding old.txt), /work/mnt, /work/bind and /work/file.txt; during the
// run the host added a file to sub and mounted file systems on DIR/mnt (a
// new tmpfs) and DIR/bind and DIR/file.txt (binds of an old directory
// and an old file, whose times say nothing changed). Copy-back deleted the
// new file with sub, and the mounted file systems' files, though the jail
// never saw either. A deletion applies only to what is unchanged since the
// run began, and never crosses a mount point: all stay, reported as
// conflicts.
//
// Before Linux 6.6 sub starts empty: the jail can remove a directory of
// DIR only while it holds nothing there (overlay marks a directory it
// emptied opaque in a user xattr, which tmpfs has from 6.6; rm -r of a
// full one fails with EIO, measured on 6.1 in make vmtest). The host's
// file in it is the jail's unseen addition all the same.
func TestAttackCopyBackDeletesHostAdditions(t *testing.T) {
	testenv.NeedJail(t)
	dir := ownedTempDir(t)
	tree := map[string]string{"sub/old.txt": "old", "mnt/": "", "bind/": "", "file.txt": "f", "gone.txt": "g", "keep.txt": "k"}
	if !tmpfsUserXattrs() {
		delete(tree, "sub/old.txt")
		tree["sub/"] = ""
	}
	writeTree(t, dir, tree)
	elsewhere := t.TempDir()
	writeTree(t, elsewhere, map[string]string{"old/inner.txt": "inner", "old.txt": "outer"})
	s := pausedScript("rm -r sub mnt bind file.txt gone.txt", "echo new > made.txt")
	s.Workdir = dir
	mount := func(src, dst, fstype, data string, flags uintptr) {
		if err := unix.Mount(src, dst, fstype, flags, data); err != nil {
			t.Fatalf("mount %s on %s: %v", src, dst, err)
		}
		t.Cleanup(func() { unix.Unmount(dst, unix.MNT_DETACH) })
	}
	r, err := runPaused(t, s, func() {
		if err := os.WriteFile(filepath.Join(dir, "sub", "new.txt"), []byte("host"), 0o644); err != nil {
			t.Error(err)
		}
		mount("tmpfs", filepath.Join(dir, "mnt"), "tmpfs", "size=1m", 0)
		if err := os.WriteFile(filepath.Join(dir, "mnt", "mounted.txt"), []byte("m"), 0o644); err != nil {
			t.Error(err)
		}
		mount(filepath.Join(elsewhere, "old"), filepath.Join(dir, "bind"), "", "", unix.MS_BIND)
		mount(filepath.Join(elsewhere, "old.txt"), filepath.Join(dir, "file.txt"), "", "", unix.MS_BIND)
	})
	if err != nil || r.Verdict != VerdictOK {
		t.Fatalf("Run: %v %+v", err, r)
	}
	for _, p := range []string{"sub/new.txt", "mnt/mounted.txt", "bind/inner.txt", "file.txt", "keep.txt", "made.txt"} {
		if _, err := os.Lstat(filepath.Join(dir, p)); err != nil {
			t.Errorf("%s after the run: %v, want it there", p, err)
		}
	}
	for _, p := range []string{"old/inner.txt", "old.txt"} {
		if _, err := os.Lstat(filepath.Join(elsewhere, p)); err != nil {
			t.Errorf("%s, mounted in DIR during the run: %v", p, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "gone.txt")); err == nil {
		t.Errorf("gone.txt, which the jail deleted and the host did not touch, is still there")
	}
	for _, p := range []string{"sub", "mnt", "bind", "file.txt"} {
		if r.CopyBack == nil || !hasLine(r.CopyBack.Conflicts, p) {
			t.Errorf("copy_back %+v: want a conflict naming %s", r.CopyBack, p)
		}
	}
}

// hasLine reports whether a line of list begins with the path p.
func hasLine(list []string, p string) bool {
	for _, l := range list {
		if strings.HasPrefix(l, p+":") || strings.HasPrefix(l, p+"/") {
			return true
		}
	}
	return false
}

// TestAttackCopyBackHalfApplied: a copy-back that failed part of the way
// left DIR half changed: deletions and copies before the failure applied,
// the rest not. Two failures: a sparse file larger than the host's file
// system allows (the jail runs with --file-size 0), and a directory the
// host makes immutable while copy-back runs (after copy-back looked at it,
// before it writes there), and more hard links to one file than ext4
// allows. Every failure leaves DIR as it was, and says so.
func TestAttackCopyBackHalfApplied(t *testing.T) {
	testenv.NeedJail(t)
	for _, tc := range []struct {
		name   string
		run    string
		lock   bool   // make sub immutable when copy-back opens z-dir
		sparse bool   // only where DIR's file system refuses a 1 PiB file
		ext4   bool   // only where DIR is on ext4
		want   string // in the error
	}{
		// Python, not truncate: busybox's (make vmtest) knows no 1P.
		{name: "sparse file larger than the host allows", sparse: true, run: `python3 -c "open('zz-big', 'w').truncate(1 << 50)"`, want: "zz-big"},
		{name: "a directory made immutable mid-way", lock: true, want: "sub/x"},
		// ext4 allows 65,000 names to an inode, the jail's tmpfs more.
		{name: "more hard links than the host allows", ext4: true, want: "too many links",
			run: `python3 -c "
import os
open('hl', 'w').write('x')
for i in range(65100): os.link('hl', 'hl%05d' % i)"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := ownedTempDir(t)
			if tc.ext4 {
				var fs unix.Statfs_t
				if err := unix.Statfs(dir, &fs); err != nil || fs.Type != unix.EXT4_SUPER_MAGIC {
					t.Skip("the temp directory is not on ext4")
				}
			}
			if tc.sparse {
				if err := takesPetabyte(dir); err == nil {
					// tmpfs (make vmtest's /tmp) takes 8 EiB, as much
					// as the jail's own tmpfs can make.
					var fs unix.Statfs_t
					unix.Statfs(dir, &fs)
					t.Skipf("DIR's file system (type %#x) took a sparse file of 1 PiB: no file the jail makes is too large for it", fs.Type)
				}
			}
			writeTree(t, dir, map[string]string{"a.txt": "a", "gone.txt": "g", "c-del/old.txt": "o",
				"c-del/inner/x": "x", "sub/keep.txt": "k", "z-dir/z.txt": "z"})
			sub := filepath.Join(dir, "sub")
			before := treeOf(t, dir)
			del := "rm -r c-del"
			if !tmpfsUserXattrs() {
				// Before Linux 6.6 the jail cannot remove a directory
				// of DIR that held anything (EIO: see
				// TestAttackCopyBackDeletesHostAdditions); the files in
				// it, deep ones too, it can.
				del = "rm c-del/old.txt c-del/inner/x"
			}
			s := spec("sh", "-c", `set -e; echo changed > a.txt; rm gone.txt; `+del+`; mkdir -p new/deep
echo n > new/deep/n.txt; ln -s a.txt link; echo x > sub/x; echo z > z-dir/new; `+tc.run)
			s.Workdir = dir
			s.Rlimits.FileSize = 0
			s.WorkSize = 512 << 20 // inodes for the links
			if tc.lock {
				t.Cleanup(func() { setImmutable(sub, false) })
				stop := onOwnOpen(t, filepath.Join(dir, "z-dir"), func() {
					if err := setImmutable(sub, true); err != nil {
						t.Errorf("make %s immutable: %v", sub, err)
					}
				})
				defer stop()
			}
			r, err := runJail(t, s, Streams{})
			if err == nil || r.Verdict != VerdictError {
				t.Fatalf("Run: %v, verdict %q: want a copy-back error", err, r.Verdict)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "unchanged") {
				t.Errorf("error %q: want it to name %s and say DIR is unchanged", err, tc.want)
			}
			if tc.lock {
				setImmutable(sub, false)
			}
			if after := treeOf(t, dir); strings.Join(after, "\n") != strings.Join(before, "\n") {
				t.Errorf("DIR after a failed copy-back:\n%s\nwant it as it was:\n%s", strings.Join(after, "\n"), strings.Join(before, "\n"))
			}
		})
	}
}

// takesPetabyte reports (nil) whether dir's file system takes a sparse
// file of 1 PiB, by making an unnamed one there.
func takesPetabyte(dir string) error {
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Ftruncate(fd, 1<<50)
}

// fsImmutableFL is FS_IMMUTABLE_FL (linux/fs.h): nothing, root included,
// may change the inode, or an entry of a directory that has it.
const fsImmutableFL = 0x10

func setImmutable(p string, on bool) error {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	if err != nil {
		return err
	}
	if on {
		flags |= fsImmutableFL
	} else {
		flags &^= fsImmutableFL
	}
	return unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(flags))
}

// onOwnOpen calls f once, the first time this process opens dir, while
// that open waits (a fanotify permission event holds it until answered):
// a fixed point inside copy-back, which runs in this process, at which
// the test acts as the host. Every other open is let through at once.
func onOwnOpen(t *testing.T, dir string, f func()) (stop func()) {
	t.Helper()
	fan, err := unix.FanotifyInit(unix.FAN_CLASS_CONTENT|unix.FAN_CLOEXEC|unix.FAN_NONBLOCK, unix.O_RDONLY|unix.O_CLOEXEC)
	if err != nil {
		t.Skipf("fanotify: %v", err)
	}
	if err := unix.FanotifyMark(fan, unix.FAN_MARK_ADD, unix.FAN_OPEN_PERM|unix.FAN_ONDIR, unix.AT_FDCWD, dir); err != nil {
		unix.Close(fan)
		t.Skipf("fanotify permission events: %v", err)
	}
	// Non-blocking, so that the runtime's poller waits and Close ends a
	// pending Read.
	file := os.NewFile(uintptr(fan), "fanotify")
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		fired := false
		for {
			n, err := file.Read(buf)
			if err != nil {
				return
			}
			for off := 0; off+int(unsafe.Sizeof(unix.FanotifyEventMetadata{})) <= n; {
				m := *(*unix.FanotifyEventMetadata)(unsafe.Pointer(&buf[off]))
				if m.Pid == int32(os.Getpid()) && !fired {
					fired = true
					f()
				}
				resp := unix.FanotifyResponse{Fd: m.Fd, Response: unix.FAN_ALLOW}
				file.Write((*[unsafe.Sizeof(resp)]byte)(unsafe.Pointer(&resp))[:])
				unix.Close(int(m.Fd))
				off += int(m.Event_len)
			}
		}
	}()
	return func() { file.Close(); <-done }
}

// TestAttackCopyBackDeepHardLink: a hard link whose first name is deeper
// than PATH_MAX made copy-back fail half-way (the link was made by a path
// from DIR). Copied back, both names are one file again.
func TestAttackCopyBackDeepHardLink(t *testing.T) {
	testenv.NeedJail(t)
	dir := ownedTempDir(t)
	writeTree(t, dir, map[string]string{"gone.txt": "g"})
	s := py(`
import os
os.remove("gone.txt")
# Made first, listed last by tmpfs: the deep name was copied first.
os.mkdir("early")
os.mkdir("deep"); os.chdir("deep")
for i in range(450):
    os.mkdir("d123456789"); os.chdir("d123456789")
open("f", "w").write("linked")
os.link("f", "/work/early/top")
open("/work/z.txt", "w").write("after")
print(len(os.getcwd()))
`)
	s.Workdir = dir
	r := mustRun(t, s)
	if r.Verdict != VerdictOK {
		t.Fatalf("verdict %q error %v", r.Verdict, r.Error)
	}
	if n := strings.TrimSpace(r.Stdout); len(n) < 4 || n < "4096" {
		t.Fatalf("the deep name is %s bytes, want more than PATH_MAX", n)
	}
	var top, deep unix.Stat_t
	if err := unix.Lstat(filepath.Join(dir, "early", "top"), &top); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(filepath.Join(dir, "deep"), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	for range 450 {
		next, err := unix.Openat(fd, "d123456789", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
	}
	err = unix.Fstatat(fd, "f", &deep, unix.AT_SYMLINK_NOFOLLOW)
	unix.Close(fd)
	if err != nil || deep.Ino != top.Ino || top.Nlink != 2 {
		t.Errorf("deep f (%v, inode %d) and top (inode %d, %d links): want one file with two names", err, deep.Ino, top.Ino, top.Nlink)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "z.txt")); string(b) != "after" {
		t.Errorf("z.txt %q, want what the jail wrote", b)
	}
	if _, err := os.Lstat(filepath.Join(dir, "gone.txt")); err == nil {
		t.Errorf("gone.txt is still there")
	}
}

// TestAttackCopyBackSymlinkOut: the jail's symlinks to /etc/shadow, to /
// or up out of DIR were recreated in DIR, owned by root: a later host
// process that follows one is the classic symlink attack. They are left
// out and reported, links that stay inside DIR come back, and what comes
// back is owned by DIR's owner and group, not the run's own group (whose
// next run could read it). (The filter refuses chmod with a set-id bit in
// the jail; TestAttackCopyBackSetID covers the bits.)
func TestAttackCopyBackSymlinkOut(t *testing.T) {
	testenv.NeedJail(t)
	dir := ownedTempDir(t)
	writeTree(t, dir, map[string]string{"sub/in.txt": "i"})
	if os.Geteuid() == 0 {
		// The group is root's: the jail then runs with the run's own gid,
		// which must not be what the copied files keep.
		if err := os.Chown(dir, 4242, 0); err != nil {
			t.Fatal(err)
		}
	}
	s := spec("sh", "-c", `set -e
ln -s /etc/shadow abs; ln -s / root; ln -s ../../../../etc/passwd up; ln -s sub/.. dot
ln -s sub/in.txt inside; mkdir nd; cd nd; ln -s ../sub/in.txt up-inside; ln -s .. parent; ln -s x/../.. trick
ln -s ../.. out2; cd ..
echo x > file; mkdir dir; echo y > dir/f`)
	s.Workdir = dir
	r := mustRun(t, s)
	if r.Verdict != VerdictOK {
		t.Fatalf("verdict %q error %v", r.Verdict, r.Error)
	}
	// "dot" stays inside as it is, but a ".." after a name goes up from
	// wherever that name leads, which a symlink could change: refused.
	for _, name := range []string{"abs", "root", "up", "dot", "nd/trick", "nd/out2"} {
		if l, err := os.Readlink(filepath.Join(dir, name)); err == nil {
			t.Errorf("%s -> %s copied back: it leads out of DIR", name, l)
		}
	}
	for name, want := range map[string]string{"inside": "sub/in.txt", "nd/up-inside": "../sub/in.txt", "nd/parent": ".."} {
		if l, err := os.Readlink(filepath.Join(dir, name)); l != want {
			t.Errorf("%s -> %q (%v), want -> %q", name, l, err, want)
		}
	}
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == dir || p == filepath.Join(dir, "sub") || p == filepath.Join(dir, "sub", "in.txt") {
			return err // DIR's own, from before the run
		}
		st := fi.Sys().(*syscall.Stat_t)
		if os.Geteuid() == 0 && (st.Uid != 4242 || st.Gid != 0) {
			t.Errorf("%s: owned by %d:%d, want DIR's 4242:0", p, st.Uid, st.Gid)
		}
		if fi.Mode()&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky) != 0 {
			t.Errorf("%s: mode %v keeps a set-id bit", p, fi.Mode())
		}
		return nil
	})
	if r.CopyBack == nil || len(r.CopyBack.Skipped) != 6 || !hasLine(r.CopyBack.Skipped, "abs") || !hasLine(r.CopyBack.Skipped, "nd/trick") {
		t.Errorf("copy_back %+v: want the six links that leave DIR reported", r.CopyBack)
	}
}

// TestAttackCopyBackSymlinkSwap: the host path of --workdir, or a
// directory below it that the jail wrote into, is swapped for a symlink to
// a directory of root's: beside DIR, or in it (where DIR's owner may not
// write, and copy-back, as root, could). The swap comes while the jail
// runs, or while copy-back runs: after it planned its changes to the
// directory, before it makes them (the test acts when copy-back opens
// z-dir, which sorts after sub). Copy-back follows none: nothing lands in
// the target, and the run says so.
func TestAttackCopyBackSymlinkSwap(t *testing.T) {
	testenv.NeedJail(t)
	for _, tc := range []struct {
		name   string
		swap   string // what becomes a symlink: "" is DIR itself
		link   string // its target: "" is the root-owned directory beside DIR
		inCopy bool   // swap while copy-back runs, not while the jail does
	}{
		{name: "the workdir path mid-run", swap: ""},
		{name: "a subdirectory mid-run", swap: "sub", link: "locked"},
		{name: "a subdirectory mid-copy to a root-owned directory in DIR", swap: "sub", link: "locked", inCopy: true},
		{name: "a subdirectory mid-copy to a directory beside DIR", swap: "sub", link: "../../rootdir", inCopy: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := reachableTempDir(t)
			dir := filepath.Join(base, "work")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			writeTree(t, dir, map[string]string{"sub/old.txt": "old", "z-dir/z.txt": "z"})
			// Root's, on the same file system as DIR (a mount between
			// would stop the copy for another reason).
			target := filepath.Join(base, "rootdir")
			if tc.link == "locked" {
				target = filepath.Join(dir, "locked")
			}
			if err := os.Mkdir(target, 0o755); err != nil {
				t.Fatal(err)
			}
			link := tc.link
			if link == "" {
				link = target
			}
			swap := func() {
				victim := filepath.Join(dir, tc.swap)
				if err := os.Rename(victim, victim+".moved"); err != nil {
					t.Error(err)
				}
				if err := os.Symlink(link, victim); err != nil {
					t.Error(err)
				}
			}
			// The jail writes first: its view of DIR is live, and after a
			// swap sub would lead it nowhere.
			s := pausedScript("echo planted > top.txt; echo planted > sub/new.txt; mkdir sub/d; echo planted > sub/d/f; echo z > z-dir/new", "true")
			s.Workdir = dir
			var r *Result
			var err error
			if tc.inCopy {
				stop := onOwnOpen(t, filepath.Join(dir, "z-dir"), swap)
				r, err = runPaused(t, s, func() {})
				stop()
			} else {
				r, err = runPaused(t, s, swap)
			}
			if names, _ := os.ReadDir(target); len(names) != 0 {
				t.Errorf("copy-back wrote %d names into the symlink's target: %v", len(names), names)
			}
			switch {
			case tc.swap == "":
				if err == nil || r.Verdict != VerdictError || !strings.Contains(err.Error(), "symbolic link") || !strings.Contains(err.Error(), "unchanged") {
					t.Errorf("Run: %v, verdict %q: want the symlink refused, DIR unchanged", err, r.Verdict)
				}
			case tc.inCopy:
				// Planned already: the whole copy stops, and what it
				// applied before is taken back.
				if err == nil || r.Verdict != VerdictError || !strings.Contains(err.Error(), "sub: a symlink") || !strings.Contains(err.Error(), "unchanged") {
					t.Errorf("Run: %v, verdict %q: want the symlink refused, DIR unchanged", err, r.Verdict)
				}
				if _, err := os.Lstat(filepath.Join(dir, "top.txt")); err == nil {
					t.Errorf("top.txt was copied back by a copy-back that failed")
				}
			default:
				// Seen before copy-back began: a conflict, the rest copied.
				if err != nil || r.Verdict != VerdictOK {
					t.Fatalf("Run: %v %+v", err, r)
				}
				if b, _ := os.ReadFile(filepath.Join(dir, "top.txt")); string(b) != "planted\n" {
					t.Errorf("top.txt %q: the rest of the copy should have come back", b)
				}
				if r.CopyBack == nil || !hasLine(r.CopyBack.Conflicts, "sub") {
					t.Errorf("copy_back %+v: want a conflict naming sub", r.CopyBack)
				}
			}
		})
	}
}

// TestAttackCopyBackOutlastsTimeout: the jail leaves 200,000 hard links
// at depth 1000 (made in about a second) and copy-back used to take its
// time over them after the run, outside --timeout. It has what the
// timeout left (copyBackGrace at least) and then stops, applying
// nothing; taking back what it did takes at most about as long again.
func TestAttackCopyBackOutlastsTimeout(t *testing.T) {
	testenv.NeedJail(t)
	dir := ownedTempDir(t)
	s := py(`
import os
for i in range(1000):
    os.mkdir("a"); os.chdir("a")
deep = os.open(".", os.O_RDONLY)
top = os.open("/work", os.O_RDONLY)
# Four files: ext4 allows 65,000 names to one.
for f in range(4):
    open("f%d" % f, "w").write("x")
    for i in range(50000):
        os.link("f%d" % f, "l%d-%d" % (f, i), src_dir_fd=deep, dst_dir_fd=top)
print("made")
`)
	s.Workdir = dir
	s.WorkSize = 1 << 30 // inodes for the links
	s.Timeout = 4 * time.Second
	start := time.Now()
	r, err := runJail(t, s, Streams{})
	took := time.Since(start)
	if r == nil || r.CopyBack == nil {
		t.Fatalf("Run: %v, no copy-back report (%+v)", err, r)
	}
	cb := r.CopyBack
	stopped := "no"
	if cb.Stopped != nil {
		stopped = *cb.Stopped
	}
	t.Logf("run %.0f ms, copy-back %.0f ms, %d entries, stopped: %s", r.WallMs, cb.Ms, cb.Files, stopped)
	// What copy-back may take: what the run left of --timeout, or the
	// grace; then at most as long again to take back what it did.
	allowed := max(s.Timeout-time.Duration(r.WallMs)*time.Millisecond, copyBackGrace)
	if limit := 2*allowed + time.Second; time.Duration(cb.Ms)*time.Millisecond > limit {
		t.Errorf("copy-back took %.0f ms, more than %v", cb.Ms, limit)
	}
	if limit := s.Timeout + 2*copyBackGrace + 2*time.Second; took > limit {
		t.Errorf("Run took %v, more than %v", took, limit)
	}
	names, _ := os.ReadDir(dir)
	if cb.Stopped != nil {
		if err == nil || !strings.Contains(*cb.Stopped, "deadline") || r.Verdict != VerdictError {
			t.Errorf("stopped %q, Run %v, verdict %q: want the deadline, and an error", *cb.Stopped, err, r.Verdict)
		}
		if len(names) != 0 {
			t.Errorf("%d names in DIR after copy-back stopped, want none", len(names))
		}
	} else if len(names) != 200001 {
		t.Errorf("copied back %d names, want 200,001", len(names))
	}
}
