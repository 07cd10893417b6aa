package jail

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/fds"
	"github.com/stockade/stockade/internal/proctest"
	"github.com/stockade/stockade/internal/testenv"
	"github.com/stockade/stockade/selftest/attacks"
	"golang.org/x/sys/unix"
)

// heldDescriptors is a payload that reports every descriptor it holds
// beyond 0-2, writes a line into each and lists each that is a directory:
// held when there is none. It is the escape suite's own probe.
var heldDescriptors = attacks.Source("fds_inherited.py")

const held = attacks.HeldDescriptors + "\n"

// inheritable opens path without close-on-exec and moves it to a high
// number, as a shell's exec 7</ does: what a caller of the library may
// hold when it starts a jail.
func inheritable(t *testing.T, path string, flags int) int {
	t.Helper()
	fd, err := unix.Open(path, flags, 0)
	if err != nil {
		t.Fatal(err)
	}
	high, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD, 100)
	unix.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(high) })
	return high
}

// A program using the library holds a descriptor on the host's / and one
// appending to a root-only file, neither close-on-exec, and starts a jail.
// Its init inherits both; the payload must hold neither: it would list the
// host's root and write the file. Only init's first step stands between
// (the process-wide mark is stockade's main's, not the library's).
func TestAttackCallerDescriptorReachesJail(t *testing.T) {
	testenv.NeedJail(t)
	log := proctest.BaitFile(t)
	dir := inheritable(t, "/", unix.O_RDONLY|unix.O_DIRECTORY)
	file := inheritable(t, log, unix.O_WRONLY|unix.O_APPEND)
	r := mustRun(t, py(heldDescriptors))
	if r.Verdict != VerdictOK || r.Stdout != held {
		t.Errorf("with fds %d (/) and %d (%s) open in the caller: verdict %s, the payload says %q %s", dir, file, log, r.Verdict, r.Stdout, r.Stderr)
	}
	proctest.WantBaitUnwritten(t, log)
}

// Copy-back duplicated a host directory's descriptor without close-on-exec
// while it listed it; a jail that another goroutine of the same process
// started at that moment inherited it, and its payload listed the host's
// directories through it (1 to 3 of 209 concurrent library runs). Here
// jails start while copy-back runs without pause and other goroutines open
// and duplicate descriptors the ways the standard library does; no jail
// may hold anything beyond 0-2, and no child the process starts either.
func TestAttackCopyBackDupRacesFork(t *testing.T) {
	testenv.NeedJail(t)
	jails, parallel := 48, 6
	if testing.Short() {
		jails = 12
	}
	// An upper layer of many small directories: copy-back lists each one
	// (it used to, twice, each time through a duplicate).
	root := t.TempDir()
	upper := filepath.Join(root, "upper")
	for i := range 400 {
		if err := os.MkdirAll(filepath.Join(upper, fmt.Sprintf("d%03d", i), "e"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rootFD, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rootFD)

	stop := make(chan struct{})
	var churn sync.WaitGroup
	var copies, opened atomic.Int64
	for range 2 {
		churn.Add(1)
		go func() {
			defer churn.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				dst, err := os.MkdirTemp(root, "dst-")
				if err != nil {
					t.Error(err)
					return
				}
				seen, err := beginWorkSeen(dst)
				if err == nil {
					err = seen.settle(dst)
				}
				if err == nil {
					_, err = copyBack(rootFD, dst, seen, copyBackLimits{deadline: time.Now().Add(time.Minute), entries: 1 << 20})
				}
				if err != nil {
					t.Errorf("copy-back: %v", err)
					return
				}
				os.RemoveAll(dst)
				copies.Add(1)
			}
		}()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	churn.Add(1)
	go func() {
		defer churn.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			// os.Open, a pipe, a socket and its duplicate (File dups).
			f, err := os.Open(upper)
			if err == nil {
				f.Readdirnames(8)
				f.Close()
			}
			if r, w, err := os.Pipe(); err == nil {
				r.Close()
				w.Close()
			}
			if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
				if tc, ok := c.(*net.TCPConn); ok {
					if dup, err := tc.File(); err == nil {
						dup.Close()
					}
				}
				c.Close()
			}
			opened.Add(1)
		}
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()

	inherited := ownInherited(t)
	var open []string
	var mu sync.Mutex
	report := func(what string) {
		mu.Lock()
		open = append(open, what)
		mu.Unlock()
	}
	sem := make(chan struct{}, parallel)
	var runs sync.WaitGroup
	for i := range jails {
		runs.Add(1)
		sem <- struct{}{}
		go func() {
			defer runs.Done()
			defer func() { <-sem }()
			s := py(heldDescriptors)
			ctx, cancel := jailContext(t, s)
			defer cancel()
			r, err := Run(ctx, s, Streams{})
			switch {
			case err != nil:
				t.Errorf("jail %d: %v", i, err)
			case r.Stdout != held:
				report(fmt.Sprintf("jail %d: %s", i, strings.TrimSpace(r.Stdout)))
			}
			// A plain child, started as the jails are: what the process
			// itself hands to every process it starts.
			if extra, err := childExtras(inherited); err != nil {
				t.Errorf("child %d: %v", i, err)
			} else if len(extra) > 0 {
				report(fmt.Sprintf("a plain child %d holds %v", i, extra))
			}
		}()
	}
	runs.Wait()
	close(stop)
	churn.Wait()
	t.Logf("%d jails while %d copy-backs and %d rounds of opens ran", jails, copies.Load(), opened.Load())
	if copies.Load() == 0 || opened.Load() == 0 {
		t.Errorf("the churn did not run alongside the jails")
	}
	for _, o := range open {
		t.Error(o)
	}
}

// ownInherited lists the descriptors this process holds without
// close-on-exec: what the test's own caller left it, which every child
// of the test gets whatever the code under test does.
func ownInherited(t *testing.T) map[string]bool {
	t.Helper()
	open, err := fds.List()
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	for _, fd := range open {
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err == nil && flags&unix.FD_CLOEXEC == 0 && fd > 2 {
			set[strconv.Itoa(fd)] = true
		}
	}
	return set
}

// childExtras starts ls on its own descriptors and returns those beyond
// 0-2, ls's listing and the test's own inheritance, with their targets.
func childExtras(inherited map[string]bool) ([]string, error) {
	out, err := exec.Command("/bin/ls", "-l", "/proc/self/fd/").Output()
	if err != nil {
		return nil, err
	}
	var extra []string
	for _, line := range strings.Split(string(out), "\n") {
		name, target, ok := strings.Cut(line, " -> ")
		if !ok {
			continue
		}
		f := strings.Fields(name)
		fd := f[len(f)-1]
		if fd == "0" || fd == "1" || fd == "2" || inherited[fd] || strings.HasPrefix(target, "/proc/") {
			continue
		}
		extra = append(extra, fd+" -> "+target)
	}
	return extra, nil
}
