package seccomp

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// runInBackground starts sup.Run and returns a wait for it to return, which
// fails the test, saying why, if it has not returned within d.
func runInBackground(t *testing.T, sup *Supervisor) func(d time.Duration, why string) {
	done := make(chan struct{})
	go func() { sup.Run(); close(done) }()
	return func(d time.Duration, why string) {
		t.Helper()
		select {
		case <-done:
		case <-time.After(d):
			t.Fatal(why)
		}
	}
}

// TestSupervisorSurvivesADeadCaller: the caller of a refused call is killed
// while its notification waits; a supervisor started afterwards must neither
// fail nor hang (RECV answers ENOENT, or the listener only hangs up).
func TestSupervisorSurvivesADeadCaller(t *testing.T) {
	h := startHelper(t, "late", "python", "0")
	fds := []unix.PollFd{{Fd: int32(h.listener), Events: unix.POLLIN}}
	if n, err := unix.Poll(fds, 10000); err != nil || n != 1 || fds[0].Revents&unix.POLLIN == 0 {
		t.Fatalf("no pending notification: n=%d err=%v revents=%#x", n, err, fds[0].Revents)
	}
	_ = h.cmd.Process.Kill()
	_ = h.wait()

	sup := NewSupervisor(h.listener)
	waitRun := runInBackground(t, sup)
	waitRun(10*time.Second, "Run did not return after the only caller died")
	if err := sup.Err(); err != nil {
		t.Errorf("supervisor: %v", err)
	}
	if err := sup.Close(); err != nil {
		t.Error(err)
	}
}

// TestSupervisorCloseStopsRunAndCallsStayRefused: Close returns promptly
// while the jail lives, and a refused call made after it fails with ENOSYS
// (the kernel's answer without a listener): stopping the supervisor never
// lets a call through.
func TestSupervisorCloseStopsRunAndCallsStayRefused(t *testing.T) {
	h := startHelper(t, "late", "python", "500")
	sup := NewSupervisor(h.listener)
	waitRun := runInBackground(t, sup)
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	if err := sup.Close(); err != nil {
		t.Error(err)
	}
	waitRun(5*time.Second, "Run did not return after Close")
	if d := time.Since(start); d > time.Second {
		t.Errorf("Close took %v", d)
	}
	if err := h.wait(); err != nil {
		t.Fatalf("helper: %v\n%s", err, h.stderr.String())
	}
	if got := strings.TrimSpace(h.stdout.String()); got != strconv.Itoa(int(unix.ENOSYS)) {
		t.Errorf("unshare after Close: errno %s, want ENOSYS (%d)", got, unix.ENOSYS)
	}
	if err := sup.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	sup.Run() // after Close: returns at once
}

// TestSupervisorReportsABadListener: a descriptor that is not open ends Run
// with an error instead of a silent, empty report.
func TestSupervisorReportsABadListener(t *testing.T) {
	// Far above any descriptor this process opens (a freshly closed number
	// would be reused at once, by the supervisor's own eventfd).
	sup := NewSupervisor(1 << 19)
	waitRun := runInBackground(t, sup)
	waitRun(5*time.Second, "Run on a closed fd did not return")
	if sup.Err() == nil {
		t.Error("Run on a closed fd reported no error")
	}
}

// TestAttackRefusedCallAnsweredBeforeCounted: a refused call is counted
// before its caller gets the EPERM, not after. Whoever reads the count as
// soon as the caller has gone on (a session's exec ended by its cell, whose
// refused calls are the difference of two readings; a run that ends at its
// payload's exit, read while the supervisor may still be running) must find
// every call the caller saw refused. Answered first, a payload that exits
// right after a refused call can leave it out of its result. The test holds
// the supervisor's lock, which counting takes, while the helper makes its
// call: the helper must not get its answer until the lock is let go.
func TestAttackRefusedCallAnsweredBeforeCounted(t *testing.T) {
	h := startHelper(t, "late", "python", "300")
	sup := NewSupervisor(h.listener)
	waitRun := runInBackground(t, sup)
	time.Sleep(50 * time.Millisecond) // Run waits in poll before the call comes
	exited := make(chan error, 1)
	sup.mu.Lock()
	go func() { exited <- h.wait() }()
	answeredFirst := false
	var err error
	select {
	case err = <-exited:
		answeredFirst = true
	case <-time.After(2 * time.Second):
	}
	sup.mu.Unlock()
	if answeredFirst {
		t.Errorf("the helper got the answer to its refused call and exited while the call could not be counted")
	} else {
		err = <-exited
	}
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, h.stderr.String())
	}
	if got := strings.TrimSpace(h.stdout.String()); got != strconv.Itoa(int(unix.EPERM)) {
		t.Errorf("unshare: errno %s, want EPERM (%d)", got, unix.EPERM)
	}
	waitRun(10*time.Second, "Run did not return after the helper exited")
	found := false
	for _, b := range sup.Blocked() {
		found = found || b.Name == "unshare"
	}
	if !found {
		t.Errorf("unshare not counted: %+v", sup.Blocked())
	}
	if err := sup.Close(); err != nil {
		t.Error(err)
	}
}
