package fds

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// helperEnv makes this test binary, started again by a test, one of the
// helpers below instead of running the tests: what a process finds and
// leaves in its table right after execve can only be seen in a new one.
const helperEnv = "STOCKADE_FDS_HELPER"

// table is what a helper reports: its descriptors from 3 up before and
// after the call under test, each with whether it is close-on-exec.
type table struct {
	Before, After map[int]string // fd -> target, "+" appended when close-on-exec
	Err           string
}

func TestMain(m *testing.M) {
	if h := os.Getenv(helperEnv); h != "" {
		helper(h)
		return
	}
	os.Exit(m.Run())
}

func snapshot() map[int]string {
	open, _ := List()
	out := map[int]string{}
	for _, fd := range open {
		if fd < 3 {
			continue
		}
		target, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
		if ok, _ := closeOnExec(fd); ok {
			target += "+"
		}
		out[fd] = target
	}
	return out
}

func helper(which string) {
	var tb table
	tb.Before = snapshot()
	var err error
	switch which {
	case "close-inherited":
		err = CloseInherited(3)
	case "cloexec-from":
		err = CloseOnExecFrom(3)
	case "mark-each":
		if err = markEach(3); err == nil {
			err = VerifyCloseOnExec(3)
		}
	default:
		err = fmt.Errorf("no helper %q", which)
	}
	if err != nil {
		tb.Err = err.Error()
	}
	tb.After = snapshot()
	json.NewEncoder(os.Stdout).Encode(tb)
	os.Exit(0)
}

// runHelper starts the helper with a descriptor on / at 3, none at 4, and
// one appending to a file at 5, none of them close-on-exec, as a caller's
// shell leaves them; Go's runtime opens its own at the numbers still free.
func runHelper(t *testing.T, which string) (table, string) {
	t.Helper()
	log := filepath.Join(t.TempDir(), "log")
	dir, err := os.Open("/")
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	file, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+which)
	cmd.ExtraFiles = []*os.File{dir, nil, file}
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper %s: %v", which, err)
	}
	var tb table
	if err := json.Unmarshal(out, &tb); err != nil {
		t.Fatalf("helper %s: %v: %s", which, err, out)
	}
	if tb.Before[3] != "/" || tb.Before[5] != log {
		t.Fatalf("the helper did not start with / at 3 and %s at 5: %v", log, tb.Before)
	}
	return tb, log
}

// ours are the descriptors a helper had that it did not inherit: Go's
// runtime's own, opened close-on-exec before main.
func ours(m map[int]string) map[int]string {
	out := map[int]string{}
	for fd, target := range m {
		if strings.HasSuffix(target, "+") {
			out[fd] = target
		}
	}
	return out
}

// Init's first step: everything inherited goes, and the runtime keeps the
// descriptors it opened before main (its cgroup CPU files, on Go 1.25 and
// later), which closing the whole range would have pulled from under it.
func TestCloseInheritedClosesOnlyWhatWasInherited(t *testing.T) {
	tb, _ := runHelper(t, "close-inherited")
	if tb.Err != "" {
		t.Fatalf("CloseInherited: %s", tb.Err)
	}
	want := ours(tb.Before)
	if fmt.Sprint(tb.After) != fmt.Sprint(want) {
		t.Errorf("after CloseInherited: %v, want the runtime's own only: %v (before: %v)", tb.After, want, tb.Before)
	}
	t.Logf("before %v, after %v", tb.Before, tb.After)
}

// Stockade's main, and init before the payload: everything stays open in
// the process and nothing reaches a child. Both ways of marking.
func TestCloseOnExecFromMarksEverything(t *testing.T) {
	for _, which := range []string{"cloexec-from", "mark-each"} {
		tb, log := runHelper(t, which)
		if tb.Err != "" {
			t.Errorf("%s: %s", which, tb.Err)
			continue
		}
		if len(tb.After) != len(tb.Before) {
			t.Errorf("%s closed descriptors: before %v, after %v", which, tb.Before, tb.After)
		}
		for fd, target := range tb.After {
			if !strings.HasSuffix(target, "+") {
				t.Errorf("%s: fd %d (%s) is not close-on-exec", which, fd, target)
			}
		}
		if tb.After[3] != "/+" || tb.After[5] != log+"+" {
			t.Errorf("%s: the inherited descriptors should stay open, marked: %v", which, tb.After)
		}
	}
}

// The read-back names a descriptor a child would inherit, with its target.
func TestVerifyCloseOnExecNamesWhatLeaks(t *testing.T) {
	log := filepath.Join(t.TempDir(), "log")
	fd, err := unix.Open(log, unix.O_CREAT|unix.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	high, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD, 500)
	unix.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(high)
	err = VerifyCloseOnExec(high)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%d (%s)", high, log)) {
		t.Errorf("VerifyCloseOnExec with %d open without the flag: %v", high, err)
	}
	unix.CloseOnExec(high)
	if err := VerifyCloseOnExec(high); err != nil {
		t.Errorf("after marking it: %v", err)
	}
}

func TestDupIsCloseOnExec(t *testing.T) {
	f, err := os.Open("/")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d, err := Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(d)
	if ok, err := closeOnExec(d); !ok || err != nil {
		t.Errorf("Dup gave %d without close-on-exec (%v)", d, err)
	}
}

// List sees a descriptor while it is open, not after, and never its own.
func TestListSeesWhatIsOpen(t *testing.T) {
	f, err := os.Open("/")
	if err != nil {
		t.Fatal(err)
	}
	fd := int(f.Fd())
	open, err := List()
	if err != nil || !slices.Contains(open, fd) || !slices.IsSorted(open) {
		t.Errorf("List with %d open: %v %v", fd, open, err)
	}
	f.Close()
	open, err = List()
	if err != nil || slices.Contains(open, fd) {
		t.Errorf("List after closing %d: %v %v", fd, open, err)
	}
	for _, fd := range open {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
			t.Errorf("List names %d, which is not open (its own listing?): %v", fd, err)
		}
	}
}

// manyFDs is more descriptors than one 4 KiB getdents64 page of
// /proc/self/fd lists (24 bytes an entry for a 3- or 4-digit number: about
// 170), so that List must read several pages.
const manyFDs = 600

// List reads /proc/self/fd page by page to its end: a descriptor past the
// first page is listed like any other. Read only once, a table of more
// than a page would hide its tail from every check built on List (the
// read-back of close-on-exec, CloseInherited).
func TestListReadsEveryPage(t *testing.T) {
	f, err := os.Open("/")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var dups []int
	defer func() {
		for _, d := range dups {
			unix.Close(d)
		}
	}()
	for range manyFDs {
		d, err := Dup(int(f.Fd()))
		if err != nil {
			t.Fatal(err)
		}
		dups = append(dups, d)
	}
	open, err := List()
	if err != nil {
		t.Fatal(err)
	}
	var missing []int
	for _, d := range dups {
		if !slices.Contains(open, d) {
			missing = append(missing, d)
		}
	}
	if len(missing) > 0 {
		t.Errorf("List with %d descriptors open misses %d of them: %v", len(open)+len(missing), len(missing), missing)
	}
}

// Init's first step with more inherited descriptors than one page lists:
// every one of them goes, none is left for the payload, and the runtime's
// own stay.
func TestCloseInheritedClosesEveryPage(t *testing.T) {
	f, err := os.Open("/")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	extra := make([]*os.File, manyFDs)
	for i := range extra {
		extra[i] = f
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=close-inherited")
	cmd.ExtraFiles = extra
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	var tb table
	if err := json.Unmarshal(out, &tb); err != nil {
		t.Fatalf("helper: %v: %s", err, out)
	}
	inherited := len(tb.Before) - len(ours(tb.Before))
	if inherited < manyFDs {
		t.Fatalf("the helper started with %d inherited descriptors, want %d", inherited, manyFDs)
	}
	if tb.Err != "" {
		t.Fatalf("CloseInherited with %d inherited: %s", inherited, tb.Err)
	}
	if want := ours(tb.Before); fmt.Sprint(tb.After) != fmt.Sprint(want) {
		t.Errorf("after CloseInherited of %d: %d descriptors left, want the runtime's own only (%d): %v", inherited, len(tb.After), len(want), tb.After)
	}
}
