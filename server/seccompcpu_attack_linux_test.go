package server

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/internal/proctest"
)

// threads is how many extra looping threads the jail starts
// (STOCKADE_ATTACK_THREADS, default 2).
func threads() int {
	if n, err := strconv.Atoi(os.Getenv("STOCKADE_ATTACK_THREADS")); err == nil && n >= 0 {
		return n
	}
	return 2
}

// procCPUs is what the host has spent on pid (utime+stime of
// /proc/pid/stat) and on the children it reaped (cutime+cstime).
func procCPUs(t *testing.T, pid int) (self, reaped time.Duration) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	tick := func(i int) time.Duration { // i counted from state (field 3)
		n, _ := strconv.ParseInt(f[i], 10, 64)
		return time.Duration(n) * 10 * time.Millisecond // USER_HZ 100
	}
	return tick(11) + tick(12), tick(13) + tick(14)
}

// TestAttackRefusedSyscallLoopCPUServe: TestAttackRefusedSyscallLoopCPU
// (jail package) against `stockade serve`, where one process answers the
// refused calls of many jails. A pooled jail's supervisor runs from set-up
// on, so with --pool 1 a lone request shares the process with another
// supervisor, and two requests at once always do. When supervisors paid by
// their own thread's clock (plus 40 us a block), this measured 682-1003 ms
// against 800 with a pool and 1.64-1.90 s against 1.6 s for two; they now
// pay by the process clock. The host's cost of the requests (the server's
// own CPU around them, less its cost for as many sleeping requests, plus
// each jail's) must stay within their --cpus, with the CLI test's 5/4 for
// what the jail's set-up and teardown cost outside the budget. The jails'
// CPU is taken from their results: the server reaps a jail's init after
// it answers, so cutime lags.
func TestAttackRefusedSyscallLoopCPUServe(t *testing.T) {
	const cpus, wall = 0.2, 4 * time.Second
	for _, c := range []struct {
		pool string
		n    int
	}{{"0", 1}, {"1", 1}, {"0", 2}} {
		t.Run(fmt.Sprintf("pool%s-requests%d", c.pool, c.n), func(t *testing.T) {
			budget := time.Duration(float64(c.n) * cpus * float64(wall))
			s := startServer(t, "--pool", c.pool)
			s.waitReady()
			time.Sleep(300 * time.Millisecond)
			pid := s.cmd.Process.Pid
			// The baseline: what the server spends on as many requests
			// that sleep as long (set-up, HTTP, close), not answering.
			b0, _ := procCPUs(t, pid)
			bs := make(chan *api.RunResponse, c.n)
			for i := 0; i < c.n; i++ {
				go func() {
					bs <- s.run(api.RunRequest{Code: code("import time\ntime.sleep(10)"), Limits: api.Limits{"cpus": cpus, "timeout": "4s"}})
				}()
			}
			for i := 0; i < c.n; i++ {
				<-bs
			}
			b1, _ := procCPUs(t, pid)
			base := b1 - b0
			s.waitReady()
			s0, _ := procCPUs(t, pid)
			rs := make(chan *api.RunResponse, c.n)
			for i := 0; i < c.n; i++ {
				go func() {
					rs <- s.run(api.RunRequest{Code: code(proctest.RefusedLoop(threads())), Limits: api.Limits{"cpus": cpus, "timeout": "4s"}})
				}()
			}
			var jailCPU time.Duration
			calls := 0
			for i := 0; i < c.n; i++ {
				r := <-rs
				if r.Verdict != "timeout" {
					t.Fatalf("verdict %s: %+v", r.Verdict, r)
				}
				jailCPU += time.Duration(r.CPUMs * float64(time.Millisecond))
				refused := 0
				for _, b := range r.BlockedSyscalls {
					refused += b.Count
				}
				// As in the jail package's test: few calls made is a slow
				// machine, calls made and not refused a missing filter.
				if made, notRefused := proctest.RefusedLoopMade(r.Stdout); notRefused || refused < made/2 {
					t.Fatalf("a loop made %d calls (one not refused: %v), the server reports %d refused: the filter did not refuse them", made, notRefused, refused)
				}
				calls += refused
			}
			s1, _ := procCPUs(t, pid)
			host := s1 - s0 - base + jailCPU
			t.Logf("--pool %s, %d at once: server %v (less %v, its cost for as many sleeping requests) + jails %v = %v in %v (limit %v), %d refused calls", c.pool, c.n, s1-s0, base, jailCPU, host, wall, budget, calls)
			if calls < 1000*c.n {
				t.Skipf("only %d refused calls: too slow to judge", calls)
			}
			if host > budget*5/4 {
				t.Errorf("the requests cost the host %v of CPU in %v, more than their limit of %v", host, wall, budget)
			}
		})
	}
}
