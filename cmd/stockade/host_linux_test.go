package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/internal/clitest"
	"github.com/stockade/stockade/internal/testenv"
)

// fakeUpstream is an HTTP proxy on loopback standing in for a site's own
// proxy (stockade's HTTPS_PROXY): it records each CONNECT and answers the
// request that comes through the tunnel itself, with "via upstream".
type fakeUpstream struct {
	ln   net.Listener
	mu   sync.Mutex
	seen []string
}

func startFakeUpstream(t *testing.T) *fakeUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &fakeUpstream{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go u.serve(c)
		}
	}()
	return u
}

func (u *fakeUpstream) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	u.mu.Lock()
	u.seen = append(u.seen, req.Method+" "+req.Host)
	u.mu.Unlock()
	if req.Method != http.MethodConnect {
		io.WriteString(c, "HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
		return
	}
	io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
	inner, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	inner.Body.Close()
	io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 12\r\nConnection: close\r\n\r\nvia upstream")
}

func (u *fakeUpstream) connects() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.seen...)
}

// TestServeUsesUpstreamProxy: stockade's own HTTPS_PROXY is the machine's
// way out, which `stockade run` used and `stockade serve` ignored: a
// server's allowlisted run dialled directly, and on a host whose only way
// out is its proxy it reached nothing. The server's jails must go through
// it as the CLI's do (the upstream proxy sees a CONNECT to the address the
// egress proxy checked, never the name).
func TestServeUsesUpstreamProxy(t *testing.T) {
	testenv.NeedJail(t)
	up := startFakeUpstream(t)
	dir := t.TempDir()
	hosts := filepath.Join(dir, "hosts")
	if err := os.WriteFile(hosts, []byte("203.0.113.10 upstream-test.invalid\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	prof := filepath.Join(dir, "net.toml")
	if err := os.WriteFile(prof, []byte("extends = \"python\"\n[network]\nallow = [\"upstream-test.invalid:80\"]\nallow_private = [\"203.0.113.0/24\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HTTPS_PROXY", "http://"+up.ln.Addr().String())
	t.Setenv("STOCKADE_NET_HOSTS", hosts)
	sock := startServeWith(t, "--pool", "0", "--profile", prof)
	code := "import urllib.request; print(urllib.request.urlopen('http://upstream-test.invalid/', timeout=10).read().decode())"
	r, err := runOn(t, sock, &api.RunRequest{Code: &code})
	if err != nil {
		t.Fatal(err)
	}
	if r.Verdict != "ok" || r.Stdout != "via upstream\n" {
		t.Errorf("run: verdict %s, stdout %q, stderr %q", r.Verdict, r.Stdout, lastLines(r.Stderr, 3))
	}
	if got := up.connects(); len(got) != 1 || got[0] != "CONNECT 203.0.113.10:80" {
		t.Errorf("the upstream proxy saw %q, want one CONNECT 203.0.113.10:80", got)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestServeCgroupParent: `stockade serve --cgroup-parent P` puts its jails'
// cgroups below P, as `stockade run --cgroup-parent` does; serve had no
// such flag, so a server could not use a delegated cgroup. P is a cgroup
// this test makes below its own (in each v1 hierarchy) and removes after:
// a pooled jail's group must be in it while it waits (the jail's own
// /proc/self/cgroup is its view, which names no host path), and the run it
// serves must work there.
func TestServeCgroupParent(t *testing.T) {
	testenv.NeedJail(t)
	rel := filepath.Join(clitest.OwnV1MemoryCgroup(t, "needs a cgroup v1 memory hierarchy (the VM covers v2)"),
		"stockadetest-serve-"+strconv.Itoa(os.Getpid()))
	dirs := clitest.MakeV1Cgroups(t, rel, []string{"memory", "cpu", "cpuacct", "pids", "freezer"}, nil)
	sock := startServeWith(t, "--pool", "1", "--cgroup-parent", rel)
	waitPool(t, sock)
	for _, d := range dirs {
		ents, _ := os.ReadDir(d)
		var groups []string
		for _, e := range ents {
			if e.IsDir() && strings.HasPrefix(e.Name(), "stockade.") {
				groups = append(groups, e.Name())
			}
		}
		if len(groups) != 1 {
			t.Errorf("%s holds %v, want the pooled jail's group", d, groups)
		}
	}
	r, err := runOn(t, sock, &api.RunRequest{Argv: []string{"echo", "ran"}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Verdict != "ok" || r.Stdout != "ran\n" || r.Cgroup != "v1" || !r.Pool.Hit {
		t.Errorf("the pooled jail's run: %+v", r)
	}
}
