package jail

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/testenv"
	"golang.org/x/sys/unix"
)

// A descriptor passed on purpose reaches the payload where it was placed
// (3) and nowhere else: init keeps no copy, so the host's end sees the end
// of file when the payload is gone, and the payload has nothing else of
// stockade's.
func TestAttackPassedDescriptorReachesOnlyThePayload(t *testing.T) {
	testenv.NeedJail(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdinW.Close()
	s := py("import os, sys\nos.write(3, b'hi from 3')\nprint(os.readlink('/proc/self/fd/3'))\nsys.stdin.read()")
	p, err := Prepare(context.Background(), s, Streams{Stdin: stdinR, Pass: []*os.File{w}})
	stdinR.Close()
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(r.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	pipe := "pipe:[" + strconv.FormatUint(st.Ino, 10) + "]"
	init := p.sv.cmd.Process.Pid
	payload := childOf(t, init)
	for _, pid := range []int{init, payload} {
		ents, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
		for _, e := range ents {
			target, _ := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "fd", e.Name()))
			if target == pipe && (pid == init || e.Name() != "3") {
				t.Errorf("process %d (init %v) holds the passed pipe as fd %s", pid, pid == init, e.Name())
			}
		}
	}
	done := make(chan *Result, 1)
	var out strings.Builder
	go func() {
		res, _ := p.Start(context.Background(), StartOptions{Stdout: &out})
		done <- res
	}()
	b := make([]byte, 64)
	n, _ := r.Read(b)
	if string(b[:n]) != "hi from 3" {
		t.Errorf("read %q from the passed pipe", b[:n])
	}
	stdinW.Close()
	res := <-done
	if res.Verdict != VerdictOK || res.Stdout != pipe+"\n" {
		t.Errorf("the payload's descriptor 3 is not the pipe passed: %+v", res)
	}
	_ = r.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.Read(b); err != io.EOF {
		t.Errorf("after the payload ended, the host's end reads %v, want EOF", err)
	}
}

func TestPassTooManyDescriptorsRefused(t *testing.T) {
	testenv.NeedJail(t)
	var pass []*os.File
	for i := 0; i < maxPass+1; i++ {
		f, err := os.Open("/dev/null")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		pass = append(pass, f)
	}
	if _, err := Prepare(context.Background(), py("pass"), Streams{Pass: pass}); err == nil || !strings.Contains(err.Error(), "descriptors to pass") {
		t.Errorf("%d descriptors: %v", len(pass), err)
	}
}

// What a live jail shows its caller: usage read while it runs, its payload
// opened by pid and no other process, its memory peak started over.
func TestLiveJailUsageAndProcess(t *testing.T) {
	testenv.NeedJail(t)
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdinW.Close()
	s := py("import sys\nx = bytearray(64 << 20)\nx[::4096] = b'x' * (len(x) // 4096)\ndel x\nsys.stdin.read()")
	p, err := Prepare(context.Background(), s, Streams{Stdin: stdinR})
	stdinR.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	done := make(chan *Result, 1)
	go func() {
		res, _ := p.Start(context.Background(), StartOptions{Lifetime: 30 * time.Second})
		done <- res
	}()
	init := p.sv.cmd.Process.Pid
	payload := childOf(t, init)
	var u Usage
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if u, err = p.Usage(); err != nil {
			t.Fatal(err)
		}
		if u.MemoryPeakBytes >= 64<<20 && u.MemoryBytes < 32<<20 {
			break // the payload's 64 MiB came and went
		}
		time.Sleep(20 * time.Millisecond)
	}
	if u.MemoryPeakBytes < 64<<20 || u.MemoryBytes >= 32<<20 || u.CPU <= 0 || u.Pids == 0 {
		t.Errorf("usage while it runs: %+v", u)
	}
	if err := p.ResetMemoryPeak(); err == nil {
		if u, _ := p.Usage(); u.MemoryPeakBytes >= 64<<20 {
			t.Errorf("the peak after a reset: %d", u.MemoryPeakBytes)
		}
	}
	for _, pid := range []int{init, os.Getpid(), 1} {
		if pr, err := p.OpenProcess(pid); err == nil {
			pr.Close()
			t.Errorf("pid %d opened as the jail's payload", pid)
		}
	}
	pr, err := p.OpenProcess(payload)
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	if err := pr.Signal(unix.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-done:
		if res.Signal == nil || *res.Signal != int(syscall.SIGTERM) {
			t.Errorf("after SIGTERM through the pidfd: %+v", res)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the payload did not end")
	}
	if _, err := p.Usage(); err != ErrEnded {
		t.Errorf("usage of an ended jail: %v", err)
	}
}

// childOf waits for init's child, the payload, and returns its pid.
func childOf(t *testing.T, init int) int {
	t.Helper()
	for i := 0; i < 200; i++ {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if ppid, err := parentOf(pid); err == nil && ppid == init {
				return pid
			}
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatalf("no child of init %d", init)
	return 0
}
