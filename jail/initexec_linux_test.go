package jail

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/stockade/stockade/internal/fds"
	"golang.org/x/sys/unix"
)

// TestInitExecSurvivesChildFDShuffle places the init memfd where Go's
// forkExec puts its error pipe in the child: one above the highest
// descriptor passed. Executed by its number in this process, the child
// finds the pipe there and execve fails with EACCES (the `start jail:
// fork/exec /proc/self/fd/N: permission denied` that TestServeSoak saw
// about once in 25 runs, when the numbers fell that way by chance).
// initExec must name a number nothing in the child's set-up overwrites.
func TestInitExecSurvivesChildFDShuffle(t *testing.T) {
	bin, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Skip("no /bin/true:", err)
	}
	saved := initExe
	initExe = bin
	defer func() { initExe = saved }()
	_, memfd, err := initPath()
	if err != nil {
		t.Fatal(err)
	}
	defer memfd.Close()

	// argv[0] "true": where /bin/true is busybox (the VM's root), the
	// applet is chosen by that name, and "4" is none.
	trueArgs := []string{"true"}

	// Two free numbers, the pair as high as any this process holds.
	open, err := fds.List()
	if err != nil {
		t.Fatal(err)
	}
	high := open[len(open)-1] + 10
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	if err := unix.Dup3(int(pr.Fd()), high, unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	passed := os.NewFile(uintptr(high), "passed")
	defer passed.Close()
	if err := unix.Dup3(int(memfd.Fd()), high+1, unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	at := os.NewFile(uintptr(high+1), "jailinit")
	defer at.Close()

	// The hazard is real with this Go: by the parent's number, it fails.
	byNumber := &exec.Cmd{Path: "/proc/self/fd/" + strconv.Itoa(high+1), Args: trueArgs, ExtraFiles: []*os.File{passed}}
	if err := byNumber.Run(); err == nil {
		t.Log("this Go's forkExec left the descriptor above the passed ones alone")
	} else if !errors.Is(err, unix.EACCES) {
		t.Logf("by the parent's number: %v", err)
	}

	for i := range 20 {
		path, extra := initExec("", at, []*os.File{passed})
		cmd := &exec.Cmd{Path: path, Args: trueArgs, ExtraFiles: extra}
		if err := cmd.Run(); err != nil {
			t.Fatalf("run %d: exec %s with %d extra files: %v", i, path, len(extra), err)
		}
	}
}
