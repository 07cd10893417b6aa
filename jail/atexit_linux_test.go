package jail

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/testenv"
)

// startAtExit prepares a jail running code once its stdin has a line, and
// starts it with AtExit, feeding the line as it starts.
func startAtExit(t *testing.T, code string) (*Prepared, *Result) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	s := py("import sys\nsys.stdin.readline()\n" + code)
	s.Timeout = 20 * time.Second
	p, err := Prepare(context.Background(), s, Streams{Stdin: r})
	r.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	go func() { w.WriteString("go\n"); w.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), jailDeadline(s.Timeout))
	defer cancel()
	res, err := p.Start(ctx, StartOptions{AtExit: true})
	if err != nil {
		t.Fatal(err)
	}
	return p, res
}

// A run that ends at its payload's exit answers before its teardown: the
// cgroup is still there when Start returns, yet the Result already has
// what it counted (read before the removal), and Close removes it all.
func TestStartAtExitAnswersBeforeTeardown(t *testing.T) {
	testenv.NeedJail(t)
	p, res := startAtExit(t, "x = bytearray(8 << 20)\nprint('done')")
	if res.Verdict != VerdictOK || res.Stdout != "done\n" {
		t.Fatalf("got %+v", res)
	}
	if p.cg == nil {
		t.Skip("no cgroup here: nothing is left for Close to remove")
	}
	if len(stockadeCgroupsOf(t, os.Getpid())) == 0 {
		t.Fatal("the cgroup was removed before Start returned: the run waited for its teardown")
	}
	if res.Cgroup == "none" || res.CPUMs <= 0 || res.PeakMemoryBytes < 8<<20 {
		t.Errorf("the cgroup's figures are missing: cgroup %s, cpu %v ms, peak %d", res.Cgroup, res.CPUMs, res.PeakMemoryBytes)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	default:
		t.Error("Close returned before the jail's init was reaped")
	}
	if left := ownLeftovers(t, os.Getpid()); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// A payload that leaves a process behind (a daemon that closed its output,
// so the drain does not wait for it) does not end the run at its exit: the
// orphan could still fork, allocate or make refused calls that the verdict
// must see. The run ends the old way, init reaped and the orphan killed,
// and Start returns with the cgroup already removed.
func TestStartAtExitWaitsForOrphans(t *testing.T) {
	testenv.NeedJail(t)
	p, res := startAtExit(t, "import os, time\nif os.fork() == 0:\n    os.close(1); os.close(2); time.sleep(60)\nprint('parent')")
	if res.Verdict != VerdictOK || res.Stdout != "parent\n" {
		t.Fatalf("got %+v", res)
	}
	if res.WallMs > 30000 {
		t.Errorf("the orphan was not killed with the jail: wall %v ms", res.WallMs)
	}
	select {
	case <-p.Done():
	default:
		t.Error("Start returned at the payload's exit with an orphan still in the jail")
	}
	if p.cg != nil && len(stockadeCgroupsOf(t, os.Getpid())) > 0 {
		t.Error("the cgroup is still there: Start returned before the orphan was gone")
	}
}
