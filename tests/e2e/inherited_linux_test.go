package e2e

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/proctest"
	"github.com/stockade/stockade/internal/testenv"
	"github.com/stockade/stockade/selftest/attacks"
)

// heldDescriptors is a payload that reports every descriptor it holds
// beyond 0-2, writes a line into each and lists each that is a directory
// (attacks.HeldDescriptors when there is none), then waits for its stdin
// to close: the escape suite's probe, and the wait.
var heldDescriptors = attacks.Source("fds_inherited.py") + `
import sys
sys.stdout.flush()
sys.stdin.read()
`

// holding lists the descriptors of pid that refer to one of files.
func holding(pid string, files ...string) []string {
	want := map[[2]uint64]string{}
	for _, f := range files {
		var st syscall.Stat_t
		if syscall.Stat(f, &st) == nil {
			want[[2]uint64{st.Dev, st.Ino}] = f
		}
	}
	var found []string
	ents, _ := os.ReadDir(filepath.Join("/proc", pid, "fd"))
	for _, e := range ents {
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join("/proc", pid, "fd", e.Name()), &st) != nil {
			continue
		}
		if f, ok := want[[2]uint64{st.Dev, st.Ino}]; ok {
			found = append(found, e.Name()+" -> "+f)
		}
	}
	return found
}

// A caller's shell holds fd 7 on the host's / and fd 8 appending to a
// root-only file, neither close-on-exec, and runs stockade: the jailed code
// listed the host's root through 7 and appended to the file through 8.
// Both locks are checked where they act: stockade itself keeps the two
// marked close-on-exec (so its init never gets them), and the payload
// holds nothing beyond 0-2; the file is unchanged.
func TestAttackInheritedDescriptorReachesJail(t *testing.T) {
	testenv.NeedJail(t)
	bin := os.Getenv("STOCKADE_BIN")
	if bin == "" {
		t.Skip("set STOCKADE_BIN to a stockade built by make build: the descriptors are stockade's main's to mark")
	}
	log := proctest.BaitFile(t)
	cmd := exec.Command("/bin/bash", "-c", `exec 7</; exec 8>>"$1"; exec "$2" run --timeout 60s -- python3 -c "$3"`,
		"bash", log, bin, heldDescriptors)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("no word from the payload: %v\n%s", err, stderr.String())
	}
	// The payload is waiting on its stdin: stockade and its init are up.
	pid := cmd.Process.Pid // bash exec'd stockade
	for _, fd := range []int{7, 8} {
		flags, err := proctest.FDFlags(pid, fd)
		if err != nil || flags&syscall.O_CLOEXEC == 0 {
			t.Errorf("stockade's fd %d: flags %#o %v, want close-on-exec", fd, flags, err)
		}
	}
	for _, p := range proctest.Children(pid) {
		if got := holding(p, "/", log); len(got) > 0 {
			t.Errorf("stockade's child %s holds %v", p, got)
		}
	}
	stdin.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("stockade did not end after its stdin closed")
	}
	if err != nil || line != attacks.HeldDescriptors+"\n" {
		t.Errorf("with fds 7 (/) and 8 (%s) open in the caller's shell: %v, the payload says %q\n%s", log, err, line, stderr.String())
	}
	proctest.WantBaitUnwritten(t, log)
}
