package jail

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/stockade/stockade/internal/testenv"
	"golang.org/x/sys/unix"
)

// onOwnOpens calls f with the path of every open this process makes of
// dir or an entry of dir, while that open waits (a fanotify permission
// event): fixed points inside copy-back at which the test acts as another
// local user who can write into DIR. f runs on one goroutine, in order.
func onOwnOpens(t *testing.T, dir string, f func(path string)) (stop func()) {
	t.Helper()
	fan, err := unix.FanotifyInit(unix.FAN_CLASS_CONTENT|unix.FAN_CLOEXEC|unix.FAN_NONBLOCK, unix.O_RDONLY|unix.O_CLOEXEC)
	if err != nil {
		t.Skipf("fanotify: %v", err)
	}
	if err := unix.FanotifyMark(fan, unix.FAN_MARK_ADD, unix.FAN_OPEN_PERM|unix.FAN_ONDIR|unix.FAN_EVENT_ON_CHILD, unix.AT_FDCWD, dir); err != nil {
		unix.Close(fan)
		t.Skipf("fanotify permission events: %v", err)
	}
	file := os.NewFile(uintptr(fan), "fanotify")
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, err := file.Read(buf)
			if err != nil {
				return
			}
			for off := 0; off+int(unsafe.Sizeof(unix.FanotifyEventMetadata{})) <= n; {
				m := *(*unix.FanotifyEventMetadata)(unsafe.Pointer(&buf[off]))
				if m.Pid == int32(os.Getpid()) {
					if p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(m.Fd))); err == nil {
						f(p)
					}
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

// swapNames exchanges two names of DIR as another user with write access
// to DIR may: renames within one directory need no right on what moves.
func swapNames(t *testing.T, dir, a, b string) {
	if err := unix.Renameat2(unix.AT_FDCWD, filepath.Join(dir, a), unix.AT_FDCWD, filepath.Join(dir, b), unix.RENAME_EXCHANGE); err != nil {
		t.Errorf("swap %s and %s: %v", a, b, err)
	}
}

// TestAttackCopyBackMergeIntoMovedDir: the jail saw DIR/a, deleted a/x.txt
// and rewrote a/y.txt. During the run the host moved a away and another
// directory (its own b, or anything from elsewhere on the file system) to
// a: the moved directory's ctime changed, the entries in it kept theirs.
// Copy-back went into the new a as into the one the jail saw, found x.txt
// and y.txt "unchanged since the run began", and deleted and replaced the
// host's files, which the jail never saw at those names.
func TestAttackCopyBackMergeIntoMovedDir(t *testing.T) {
	testenv.NeedJail(t)
	dir := ownedTempDir(t)
	writeTree(t, dir, map[string]string{"a/x.txt": "jail saw x", "a/y.txt": "jail saw y", "b/x.txt": "host b x", "b/y.txt": "host b y"})
	s := pausedScript("rm a/x.txt; echo jail > a/y.txt; echo new > a/new.txt", "true")
	s.Workdir = dir
	r, err := runPaused(t, s, func() {
		if err := os.Rename(filepath.Join(dir, "a"), filepath.Join(dir, "a.old")); err != nil {
			t.Error(err)
		}
		if err := os.Rename(filepath.Join(dir, "b"), filepath.Join(dir, "a")); err != nil {
			t.Error(err)
		}
	})
	if err != nil && r == nil {
		t.Fatalf("Run: %v", err)
	}
	for name, want := range map[string]string{"a/x.txt": "host b x", "a/y.txt": "host b y", "a.old/x.txt": "jail saw x", "a.old/y.txt": "jail saw y"} {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != want {
			t.Errorf("%s after the run: %q %v, want %q (the host's, which the jail never saw there)", name, b, err, want)
		}
	}
	if r.CopyBack == nil || !hasLine(r.CopyBack.Conflicts, "a") {
		t.Errorf("copy_back %+v: want a conflict naming a", r.CopyBack)
	}
}

// TestAttackCopyBackMergeSwappedAtCommit: the same as another local user
// who can write into DIR, at the moment between plan and commit: the plan
// checked DIR/a's entries, then a and b were exchanged (a rename in DIR,
// which needs no right on b), and commit removed b/x.txt, which the
// jail never saw, as root.
func TestAttackCopyBackMergeSwappedAtCommit(t *testing.T) {
	testenv.NeedJail(t)
	dir := ownedTempDir(t)
	writeTree(t, dir, map[string]string{"a/x.txt": "jail saw x", "b/x.txt": "host b x"})
	// b is another user's, and not writable by DIR's owner.
	if err := os.Chown(filepath.Join(dir, "b", "x.txt"), 4343, 4343); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "b"), 0o555); err != nil {
		t.Fatal(err)
	}
	// z.txt (after a in the plan's order) makes the staging directory.
	s := pausedScript("rm a/x.txt; echo z > z.txt", "true")
	s.Workdir = dir
	swapped := false
	stop := onOwnOpens(t, dir, func(p string) {
		if !swapped && strings.Contains(p, "/.stockade-copyback-") {
			swapped = true
			swapNames(t, dir, "a", "b")
		}
	})
	r, err := runPaused(t, s, func() {})
	stop()
	if !swapped {
		t.Fatalf("the staging directory was never opened: %v %+v", err, r)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "a", "x.txt")); err != nil || string(b) != "host b x" {
		t.Errorf("a/x.txt (b's, swapped in after the plan): %q %v, want it kept", b, err)
	}
}

// TestAttackCopyBackStageNameSwap: another local user who can write into
// DIR renames the staging directory (it is listed in DIR while copy-back
// runs) and gives its name to a directory of someone else's. Copy-back
// removed the staging directory by its name, as root: everything in the
// other directory, which that user could not delete.
func TestAttackCopyBackStageNameSwap(t *testing.T) {
	testenv.NeedJail(t)
	dir := ownedTempDir(t)
	writeTree(t, dir, map[string]string{"a/old.txt": "o", "victim/deep/v.txt": "victim's"})
	for _, p := range []string{"victim/deep/v.txt", "victim/deep", "victim"} {
		if err := os.Chown(filepath.Join(dir, p), 4343, 4343); err != nil {
			t.Fatal(err)
		}
	}
	s := pausedScript("echo new > a/new.txt; echo z > z.txt", "true")
	s.Workdir = dir
	stage := ""
	stop := onOwnOpens(t, dir, func(p string) {
		switch {
		case stage == "" && strings.Contains(p, "/.stockade-copyback-"):
			stage = filepath.Base(p)
		case stage != "" && filepath.Base(p) == "a":
			// Commit began: swap once.
			if err := os.Rename(filepath.Join(dir, stage), filepath.Join(dir, ".moved-stage")); err != nil {
				t.Error(err)
			}
			if err := os.Rename(filepath.Join(dir, "victim"), filepath.Join(dir, stage)); err != nil {
				t.Error(err)
			}
			stage = "done"
		}
	})
	r, err := runPaused(t, s, func() {})
	stop()
	if stage != "done" {
		t.Fatalf("no swap made (%q): %v %+v", stage, err, r)
	}
	names, _ := filepath.Glob(filepath.Join(dir, ".stockade-copyback-*", "deep", "v.txt"))
	if len(names) != 1 {
		t.Errorf("the victim's deep/v.txt, given the staging directory's name, is gone: copy-back removed another user's tree (err %v)", err)
	}
}
