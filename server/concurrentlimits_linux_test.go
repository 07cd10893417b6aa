package server

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stockade/stockade/api"
)

// seeLimits prints what the jail itself sees of its limits: the memory
// its /proc/meminfo shows (the run's own, package procview), its open
// files and file size rlimits; then it tries to hold 200 MiB.
const seeLimits = `import resource
mem = [l.split()[1] for l in open("/proc/meminfo") if l.startswith("MemTotal:")][0]
print(int(mem) // 1024, resource.getrlimit(resource.RLIMIT_NOFILE)[0], resource.getrlimit(resource.RLIMIT_FSIZE)[0], flush=True)
b = bytearray(200 << 20)
for i in range(0, len(b), 4096): b[i] = 1
print("held")`

// TestAttackConcurrentRequestsShareAPolicy: requests with different limits
// arrive at once at a full pool, one jail waiting for each. Only those that
// differ from the profile in the timeout alone may take a pooled jail; each
// jail must be held to its own request's limits and no other's (nothing of
// one request's layer may reach the server's profile, the pool's spec or
// another request), and each result must say those limits.
func TestAttackConcurrentRequestsShareAPolicy(t *testing.T) {
	s := startServer(t, "--pool", "4")
	type want struct {
		limits        api.Limits
		memMiB, files int
		fsize         int64
		verdict       string
		hit           bool
	}
	cases := []want{
		{nil, 512, 256, 64 << 20, "ok", true},
		{api.Limits{"memory": "128M", "open_files": 64, "file_size": "1M"}, 128, 64, 1 << 20, "memory", false},
		{api.Limits{"timeout": "8s"}, 512, 256, 64 << 20, "ok", true},
		{api.Limits{"memory": "160M", "open_files": 100}, 160, 100, 64 << 20, "memory", false},
	}
	errs := make(chan string, 2*len(cases))
	for round := range 2 {
		s.waitReady()
		var wg sync.WaitGroup
		for i, c := range cases {
			wg.Add(1)
			go func() {
				defer wg.Done()
				status, _, body := postTo(t, s.hc, api.RunRequest{Code: code(seeLimits), Limits: c.limits}, nil)
				var r api.RunResponse
				if status != 200 || json.Unmarshal(body, &r) != nil || r.Result == nil {
					errs <- fmt.Sprintf("round %d request %d: %d %.300s", round, i, status, body)
					return
				}
				saw := fmt.Sprintf("%d %d %d\n", c.memMiB, c.files, c.fsize)
				l := r.Limits
				if !strings.HasPrefix(r.Stdout, saw) || string(r.Verdict) != c.verdict || r.Pool.Hit && !c.hit ||
					l.MemoryBytes == nil || *l.MemoryBytes != int64(c.memMiB)<<20 || l.OpenFiles != uint64(c.files) ||
					l.FileSizeBytes == nil || *l.FileSizeBytes != uint64(c.fsize) {
					errs <- fmt.Sprintf("round %d request %d (limits %v, pool hit %v): verdict %s, saw %q, result limits memory %v open files %d file size %v; want %s, saw %q",
						round, i, c.limits, r.Pool.Hit, r.Verdict, r.Stdout, deref(l.MemoryBytes), l.OpenFiles, deref(l.FileSizeBytes), c.verdict, saw)
				}
			}()
		}
		wg.Wait()
	}
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
