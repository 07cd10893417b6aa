package proctest

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A command that outlives its deadline is killed with the whole process
// group it started (here a shell's background child, as a stockade's
// helpers would be), at the deadline and not later, and the outcome keeps
// what it printed until then.
func TestWaitKillsTheGroupAtTheDeadline(t *testing.T) {
	pidFile := t.TempDir() + "/child"
	cmd := exec.Command("sh", "-c", `sleep 60 & echo $! > "$0"; echo started; echo warn >&2; wait`, pidFile)
	p, err := Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Await(5*time.Second, "started\n") {
		t.Fatalf("no output: %q %q", p.Stdout(), p.Stderr())
	}
	o := p.Wait(500 * time.Millisecond)
	if !o.Expired || o.Took > 3*time.Second {
		t.Fatalf("expired %v after %v, want expired at 500ms", o.Expired, o.Took)
	}
	if o.Stdout != "started\n" || o.Stderr != "warn\n" || o.Code() != -1 {
		t.Errorf("outcome: stdout %q, stderr %q, code %d", o.Stdout, o.Stderr, o.Code())
	}
	msg := o.Overstayed()
	for _, want := range []string{"sh -c", "still running after 500ms", `stdout so far "started\n"`, `stderr so far "warn\n"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("Overstayed() = %q, want it to hold %q", msg, want)
		}
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	child, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(child, 0) == nil {
		// A zombie until its reaper (init or a subreaper) collects it.
		if st, err := os.ReadFile("/proc/" + strconv.Itoa(child) + "/stat"); err == nil && strings.Contains(string(st), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			syscall.Kill(child, syscall.SIGKILL)
			t.Fatalf("the shell's background child %d outlived the kill of its group", child)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A command that ends in time is not killed, and its exit status and
// output reach the caller's writer as well as the outcome.
func TestWaitInTime(t *testing.T) {
	var mine strings.Builder
	cmd := exec.Command("sh", "-c", "echo out; exit 3")
	cmd.Stdout = &mine
	o := Run(t, cmd, 10*time.Second)
	if o.Expired || o.Code() != 3 || o.Stdout != "out\n" || mine.String() != "out\n" || o.Overstayed() != "" {
		t.Fatalf("outcome %+v, caller's writer %q", o, mine.String())
	}
	if code, ok := ExitCode(o.Err); !ok || code != 3 {
		t.Errorf("ExitCode(%v) = %d, %v", o.Err, code, ok)
	}
}

// Within cancels f's context at the deadline and says so; f that returns
// in time is not cancelled.
func TestWithin(t *testing.T) {
	begin := time.Now()
	var cause error
	expired := Within(t, 200*time.Millisecond, func(ctx context.Context) {
		<-ctx.Done()
		cause = context.Cause(ctx)
	})
	if !expired || time.Since(begin) > 5*time.Second || cause == nil || !strings.Contains(cause.Error(), "deadline of 200ms") {
		t.Errorf("expired %v after %v, cause %v", expired, time.Since(begin), cause)
	}
	if Within(t, 10*time.Second, func(context.Context) {}) {
		t.Error("a function that returned at once expired")
	}
}

// Budget keeps a test's deadline inside go test's: a test that has less
// left than it asks for gets what is left, less a margin.
func TestBudget(t *testing.T) {
	end, ok := t.Deadline()
	if !ok {
		if got := Budget(t, time.Hour); got != time.Hour {
			t.Errorf("no go test deadline: Budget(1h) = %v", got)
		}
		return
	}
	if got := Budget(t, 100*365*24*time.Hour); got >= time.Until(end) {
		t.Errorf("Budget = %v, at or past go test's deadline in %v", got, time.Until(end))
	}
	if got := Budget(t, time.Millisecond); got != time.Millisecond {
		t.Errorf("Budget(1ms) = %v, want 1ms", got)
	}
}

// Stdout and stderr given one writer stay one stream in the order written,
// as CombinedOutput has them.
func TestOneWriterForBothStaysOneStream(t *testing.T) {
	var both strings.Builder
	cmd := exec.Command("sh", "-c", "echo a; echo b >&2; echo c")
	cmd.Stdout, cmd.Stderr = &both, &both
	if o := Run(t, cmd, 10*time.Second); o.Stdout != "a\nb\nc\n" || both.String() != "a\nb\nc\n" {
		t.Fatalf("kept %q, the caller's writer got %q", o.Stdout, both.String())
	}
}
