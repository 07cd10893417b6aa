package server

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// heldDescriptors reports every descriptor the run's code holds beyond
// 0-2, writes a line into each and lists each that is a directory: "HELD"
// when there is none.
const heldDescriptors = `import os
held = []
for n in sorted(os.listdir("/proc/self/fd"), key=int):
    fd = int(n)
    if fd <= 2:
        continue
    try:
        target = os.readlink("/proc/self/fd/%d" % fd)
    except OSError:
        continue  # the listing's own descriptor, closed by now
    held.append("%d->%s" % (fd, target))
    try:
        os.write(fd, b"written from the jail\n")
        held.append("wrote %d" % fd)
    except OSError:
        pass
    try:
        held.append("listed %d: %s" % (fd, sorted(os.listdir(fd))[:4]))
    except OSError:
        pass
print("OPEN " + "; ".join(held) if held else "HELD")
`

// `exec stockade serve` from a shell or a unit that left descriptors open
// gave them to every request's jail, of every caller. Here the server
// starts with fd 7 on the host's / and fd 8 appending to a root-only file,
// neither close-on-exec; no request's code, whether its jail was prepared
// in the pool before the request or started for it, holds either, the
// server keeps both marked close-on-exec, and the file is unchanged.
func TestAttackServeInheritedDescriptor(t *testing.T) {
	bin := needServer(t)
	log := filepath.Join(t.TempDir(), "only.log")
	if err := os.WriteFile(log, nil, 0o600); err != nil {
		t.Fatal(err)
	}
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
		req := RunRequest{Code: code(heldDescriptors)}
		if i%2 == 1 {
			// Limits of its own: a jail started for the request.
			req.Limits = Limits{"memory": "64M"}
		}
		r := s.run(req)
		if r.Pool.Hit {
			hits++
		} else {
			misses++
		}
		if r.Verdict != "ok" || r.Stdout != "HELD\n" {
			t.Errorf("request %d (pool: %+v): verdict %s, the code says %q %s", i, r.Pool, r.Verdict, r.Stdout, r.Stderr)
		}
	}
	if hits == 0 || misses == 0 {
		t.Errorf("%d requests from the pool, %d started for the request: want both kinds", hits, misses)
	}
	for _, fd := range []int{7, 8} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%d", s.cmd.Process.Pid, fd))
		flags := uint64(0)
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "flags:"); ok {
				flags, _ = strconv.ParseUint(strings.TrimSpace(v), 8, 64)
			}
		}
		if err != nil || flags&syscall.O_CLOEXEC == 0 {
			t.Errorf("the server's fd %d: flags %#o %v, want close-on-exec", fd, flags, err)
		}
	}
	if b, err := os.ReadFile(log); err != nil || len(b) != 0 {
		t.Errorf("%s after the runs: %q %v, want it empty", log, b, err)
	}
}
