package jail

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
	// Init exits right after its report, and the supervisor may hear the
	// exit before the report (about one run in ten on a busy host): that
	// run ends the old way, as it safely may, since whether init was
	// alone can no longer be read. So a few runs are allowed; one of them
	// must end early.
	var p *Prepared
	var res *Result
	for attempt := 1; ; attempt++ {
		p, res = startAtExit(t, "x = bytearray(8 << 20)\nprint('done')")
		if res.Verdict != VerdictOK || res.Stdout != "done\n" {
			t.Fatalf("got %+v", res)
		}
		if p.cg == nil {
			t.Skip("no cgroup here: nothing is left for Close to remove")
		}
		if len(stockadeCgroupsOf(t, os.Getpid())) > 0 {
			break
		}
		p.Close()
		if attempt == 5 {
			t.Fatal("the cgroup was removed before Start returned, 5 runs of 5: the run waited for its teardown")
		}
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
// so the drain does not wait for it) does not end the run at its exit
// while the orphan lives: it could still fork, allocate or make refused
// calls that the verdict must see. When Start returns, nothing of the jail
// but its init is alive: the run ended the old way (init reaped, the
// orphan killed with it), or, when init had already exited and the kernel
// had killed the orphan by the time the supervisor looked, early with
// nothing left.
func TestStartAtExitWaitsForOrphans(t *testing.T) {
	testenv.NeedJail(t)
	p, res := startAtExit(t, "import os, time\nif os.fork() == 0:\n    os.close(1); os.close(2); time.sleep(60)\nprint('parent')")
	if res.Verdict != VerdictOK || res.Stdout != "parent\n" {
		t.Fatalf("got %+v", res)
	}
	if res.WallMs > 30000 {
		t.Errorf("the orphan was not killed with the jail: wall %v ms", res.WallMs)
	}
	init := strconv.Itoa(p.sv.cmd.Process.Pid)
	for _, cg := range stockadeCgroupsOf(t, os.Getpid()) {
		b, err := os.ReadFile(filepath.Join(cg, "cgroup.procs"))
		if err != nil {
			continue // removed meanwhile: nothing in it
		}
		for _, pid := range strings.Fields(string(b)) {
			if pid != init {
				t.Errorf("Start returned with process %s still in the jail's cgroup %s", pid, cg)
			}
		}
	}
}
