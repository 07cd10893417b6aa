package jail

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/proctest"
	"github.com/stockade/stockade/internal/runlock"
	"github.com/stockade/stockade/internal/testenv"
)

// TestAttackSweepRemovesLiveJails: a long-lived stockade's shutdown sweep
// (jail.Sweep, 8909a35) runs while other stockades' jails are alive: a
// prepared jail waiting for its job (a server's pool), a running jail in
// this process, and a sibling CLI run in another process, all in the same
// lock directory. The sweep may remove only what a dead owner left; every
// live jail must finish with its output and its /work intact. A control
// slot abandoned with a record proves the sweep really ran.
func TestAttackSweepRemovesLiveJails(t *testing.T) {
	testenv.NeedJail(t)
	bin := testenv.NeedBinary(t, "it makes the sibling CLI run")
	lockDir := filepath.Join(t.TempDir(), "runs")
	t.Setenv(runlock.DirEnv, lockDir)

	// A prepared jail, waiting (a pool's).
	waiting, err := Prepare(context.Background(), spec("sh", "-c", "echo hi > /work/f; sleep 2; cat /work/f"), Streams{})
	if err != nil {
		t.Fatal(err)
	}
	defer waiting.Close()
	// A running jail in this process.
	type out struct {
		r   *Result
		err error
	}
	ran := make(chan out, 1)
	go func() {
		s := spec("sh", "-c", "echo x > /work/f; sleep 2; cat /work/f")
		ctx, cancel := jailContext(t, s)
		defer cancel()
		r, err := Run(ctx, s, Streams{})
		ran <- out{r, err}
	}()
	// A sibling CLI run.
	cli := exec.Command(bin, "run", "--", "sh", "-c", "echo cli > /work/f; sleep 2; cat /work/f")
	cli.Env = append(os.Environ(), runlock.DirEnv+"="+lockDir)
	sibling, err := proctest.Start(cli)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(700 * time.Millisecond) // all three hold their slots now
	// The control, made once the three hold their slots (any start sweeps):
	// a slot whose owner "died", recording a run directory.
	if err := os.MkdirAll(RunBase(), 0o711); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(RunBase(), "r9999-1-sweepattack")
	if err := os.MkdirAll(filepath.Join(dead, "work"), 0o700); err != nil {
		t.Fatal(err)
	}
	l, err := runlock.Acquire(lockDir, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err = l.Record(recordRunDir, dead); err != nil {
		t.Fatal(err)
	}
	l.Abandon()

	var notices bytes.Buffer
	for i := 0; i < 5; i++ {
		if err := Sweep(&notices); err != nil {
			t.Errorf("sweep %d: %v", i, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := os.Lstat(dead); !os.IsNotExist(err) {
		t.Errorf("control: the dead slot's run directory %s survived the sweep (%v); notices: %s", dead, err, notices.String())
	}
	r, err := waiting.Start(context.Background(), StartOptions{Timeout: 10 * time.Second})
	if err != nil || r.Verdict != VerdictOK || r.Stdout != "hi\n" {
		t.Errorf("the waiting jail after the sweep: %v %+v", err, r)
	}
	o := <-ran
	if o.err != nil || o.r.Verdict != VerdictOK || o.r.Stdout != "x\n" {
		t.Errorf("the running jail after the sweep: %v %+v", o.err, o.r)
	}
	if c := sibling.Wait(jailDeadline(10 * time.Second)); c.Expired || c.Err != nil || c.Stdout != "cli\n" {
		t.Errorf("the sibling CLI run after the sweep: %v %q %q %s", c.Err, c.Stdout, c.Stderr, c.Overstayed())
	}
	if strings.Contains(notices.String(), "-"+strconv.Itoa(os.Getpid())+"-") || strings.Contains(notices.String(), "killed") {
		t.Errorf("the sweep touched a live run: %s", notices.String())
	}
	t.Logf("sweep notices: %s", notices.String())
}
