package server

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/internal/proctest"
	"github.com/stockade/stockade/selftest/attacks"
)

// heldDescriptors reports every descriptor the run's code holds beyond
// 0-2, writes a line into each and lists each that is a directory
// (attacks.HeldDescriptors when there is none): the escape suite's probe.
var heldDescriptors = attacks.Source("fds_inherited.py")

// `exec stockade serve` from a shell or a unit that left descriptors open
// gave them to every request's jail, of every caller. Here the server
// starts with fd 7 on the host's / and fd 8 appending to a root-only file,
// neither close-on-exec; no request's code, whether its jail was prepared
// in the pool before the request or started for it, holds either, the
// server keeps both marked close-on-exec, and the file is unchanged.
func TestAttackServeInheritedDescriptor(t *testing.T) {
	bin := needServer(t)
	log := proctest.BaitFile(t)
	root, err := os.Open("/")
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	file, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	sock := filepath.Join(socketDir(t), "s.sock")
	s := startServerWith(t, bin, sock, []*os.File{nil, nil, nil, nil, root, file}, "--pool", "2", "--concurrency", "2")
	hits, misses := 0, 0
	for i := range 5 {
		req := api.RunRequest{Code: code(heldDescriptors)}
		if i%2 == 1 {
			// Limits of its own: a jail started for the request.
			req.Limits = api.Limits{"memory": "64M"}
		}
		r := s.run(req)
		if r.Pool.Hit {
			hits++
		} else {
			misses++
		}
		if r.Verdict != "ok" || r.Stdout != attacks.HeldDescriptors+"\n" {
			t.Errorf("request %d (pool: %+v): verdict %s, the code says %q %s", i, r.Pool, r.Verdict, r.Stdout, r.Stderr)
		}
	}
	if hits == 0 || misses == 0 {
		t.Errorf("%d requests from the pool, %d started for the request: want both kinds", hits, misses)
	}
	for _, fd := range []int{7, 8} {
		flags, err := proctest.FDFlags(s.cmd.Process.Pid, fd)
		if err != nil || flags&syscall.O_CLOEXEC == 0 {
			t.Errorf("the server's fd %d: flags %#o %v, want close-on-exec", fd, flags, err)
		}
	}
	proctest.WantBaitUnwritten(t, log)
}
