package proctest

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"
)

// A child this process starts is listed while it lives and not after it
// is reaped; a process that is not our child is not listed.
func TestChildren(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := strconv.Itoa(cmd.Process.Pid)
	kids := Children(os.Getpid())
	cmd.Process.Kill()
	cmd.Wait()
	if !slices.Contains(kids, pid) {
		t.Errorf("Children(%d) = %v, want it to hold the child %s", os.Getpid(), kids, pid)
	}
	if slices.Contains(kids, strconv.Itoa(os.Getpid())) {
		t.Errorf("Children(%d) = %v holds the process itself", os.Getpid(), kids)
	}
	if kids := Children(os.Getpid()); slices.Contains(kids, pid) {
		t.Errorf("after the child was reaped, Children(%d) = %v still holds %s", os.Getpid(), kids, pid)
	}
}
