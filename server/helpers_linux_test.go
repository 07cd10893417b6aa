package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/internal/proctest"
	"github.com/stockade/stockade/internal/testenv"
	"github.com/stockade/stockade/jail"
)

// These tests run a real `stockade serve` (the binary make build made,
// STOCKADE_BIN) on a socket in a temporary directory and talk to it over
// HTTP as any client would. They need root, as the jails do.
func needServer(t *testing.T) string {
	t.Helper()
	testenv.NeedRoot(t, "starts real jails")
	return testenv.NeedBinary(t, "the tests run a real stockade serve")
}

type testServer struct {
	t      *testing.T
	cmd    *exec.Cmd
	sock   string
	log    *proctest.Buffer
	hc     *http.Client
	exited chan struct{}
	before map[string]bool // run directories and cgroups there before it started
}

// socketDir is a directory other users can traverse, for the tests that
// connect as another uid.
func socketDir(t *testing.T) string {
	d, err := os.MkdirTemp("", "stockade-serve-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// startServer starts `stockade serve` with args and waits until its pool
// is full. Cleanup stops it with SIGTERM and checks it removed its socket.
func startServer(t *testing.T, args ...string) *testServer {
	t.Helper()
	bin := needServer(t)
	sock := filepath.Join(socketDir(t), "s.sock")
	return startServerAt(t, bin, sock, args...)
}

func startServerAt(t *testing.T, bin, sock string, args ...string) *testServer {
	t.Helper()
	return startServerWith(t, bin, sock, nil, args...)
}

// startServerWith starts the server with extra descriptors open: entry i
// of files becomes fd 3+i, without close-on-exec (nil: none there).
func startServerWith(t *testing.T, bin, sock string, files []*os.File, args ...string) *testServer {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--socket", sock}, args...)...)
	cmd.ExtraFiles = files
	return startServerCmd(t, sock, cmd)
}

// startServerCmd starts cmd, which execs `stockade serve --socket sock`
// in its own process (a wrapper may come first, and exec it).
func startServerCmd(t *testing.T, sock string, cmd *exec.Cmd) *testServer {
	t.Helper()
	return startServerReadyWithin(t, sock, cmd, 30*time.Second)
}

// startServerReadyWithin is startServerCmd waiting up to ready for its
// pools (a VM profile's boot guests).
func startServerReadyWithin(t *testing.T, sock string, cmd *exec.Cmd, ready time.Duration) *testServer {
	t.Helper()
	s := &testServer{t: t, sock: sock, log: &proctest.Buffer{}, exited: make(chan struct{}), before: entrySet()}
	s.cmd = cmd
	s.cmd.Stderr = s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.cmd.Wait(); close(s.exited) }()
	s.hc = unixClient(sock)
	t.Cleanup(func() { s.stop() })
	s.waitReadyWithin(ready)
	return s
}

func unixClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
}

// waitReady waits until every pool is full.
func (s *testServer) waitReady() {
	s.t.Helper()
	s.waitReadyWithin(30 * time.Second)
}

func (s *testServer) waitReadyWithin(d time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		var h api.Health
		if code := s.get("/v1/health", &h); code == 200 {
			full := true
			for _, p := range h.Pool {
				full = full && p.Ready >= p.Target
			}
			if full {
				return
			}
		}
		select {
		case <-s.exited:
			s.t.Fatalf("server exited: %v\n%s", s.cmd.ProcessState, s.log)
		case <-time.After(50 * time.Millisecond):
		}
	}
	s.t.Fatalf("server not ready in %v:\n%s", d, s.log)
}

func (s *testServer) logString() string { return s.log.String() }

func (s *testServer) stop() {
	select {
	case <-s.exited:
		return
	default:
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		s.t.Errorf("server did not stop within 30s of SIGTERM:\n%s", s.log)
		<-s.exited
	}
	if _, err := os.Lstat(s.sock); !os.IsNotExist(err) {
		s.t.Errorf("socket %s left after shutdown: %v", s.sock, err)
	}
	if left := leftovers(s.cmd.Process.Pid, s.before); len(left) > 0 {
		s.t.Errorf("left behind by the server: %v\nits log:\n%s", left, s.logString())
	}
}

func (s *testServer) get(path string, into any) int {
	resp, err := s.hc.Get("http://stockade" + path)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	if into != nil {
		json.NewDecoder(resp.Body).Decode(into)
	}
	return resp.StatusCode
}

// post sends body (a string, or anything else marshalled) to /v1/run.
func (s *testServer) post(body any) (int, http.Header, []byte) {
	s.t.Helper()
	return postTo(s.t, s.hc, body, nil)
}

func postTo(t *testing.T, hc *http.Client, body any, hdr map[string]string) (int, http.Header, []byte) {
	t.Helper()
	var b []byte
	if str, ok := body.(string); ok {
		b = []byte(str)
	} else {
		var err error
		if b, err = json.Marshal(body); err != nil {
			t.Fatal(err)
		}
	}
	limit := ""
	if r, ok := body.(api.RunRequest); ok {
		limit, _ = r.Limits["timeout"].(string)
	}
	d := proctest.Budget(t, runDeadline(limit))
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://stockade/v1/run", bytes.NewReader(b))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if ctx.Err() != nil {
		t.Fatalf("POST /v1/run: no answer within the test's deadline of %v: the run outlived its timeout (%q, the server's default if empty): %v", d, limit, err)
	}
	if err != nil {
		t.Fatalf("POST /v1/run: %v", err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, out
}

// run posts req and decodes the result, failing on anything but 200.
func (s *testServer) run(req api.RunRequest) *api.RunResponse {
	s.t.Helper()
	code, _, body := s.post(req)
	if code != 200 {
		s.t.Fatalf("POST /v1/run: %d %s", code, body)
	}
	var r api.RunResponse
	if err := json.Unmarshal(body, &r); err != nil || r.Result == nil {
		s.t.Fatalf("decode %s: %v", body, err)
	}
	return &r
}

func code(s string) *string { return &s }

// runDeadline is how long a test waits on a run whose timeout is limit
// (the python profile's 10 s if ""): twice that, and 30 s for set-up,
// teardown and the pool's refill on a loaded machine.
func runDeadline(limit string) time.Duration {
	d, err := time.ParseDuration(limit)
	if err != nil {
		d = 10 * time.Second
	}
	return 2*d + 30*time.Second
}

// stockadeEntries lists every run directory and stockade cgroup where
// leftovers looks, whoever made them.
func stockadeEntries() []string {
	var all []string
	ents, _ := os.ReadDir(jail.RunBase())
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "r") {
			all = append(all, "run dir "+e.Name())
		}
	}
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return all
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 || strings.HasPrefix(parts[1], "name=") {
			continue
		}
		mnt := "/sys/fs/cgroup"
		if parts[1] != "" {
			mnt = "/sys/fs/cgroup/" + strings.Split(parts[1], ",")[0]
		}
		dir := filepath.Join(mnt, parts[2])
		for _, d := range []string{dir, filepath.Dir(dir)} {
			ents, _ := os.ReadDir(d)
			for _, e := range ents {
				if e.IsDir() && strings.HasPrefix(e.Name(), "stockade") {
					all = append(all, "cgroup "+filepath.Join(d, e.Name()))
				}
			}
		}
	}
	return all
}

// entrySet is stockadeEntries as a set.
func entrySet() map[string]bool {
	set := map[string]bool{}
	for _, e := range stockadeEntries() {
		set[e] = true
	}
	return set
}

// leftovers lists the run directories and cgroups of runs that process
// pid made (their names carry it) and that were not there before it
// started (before, from entrySet), and its jails' processes. Pids are
// reused: a run directory or cgroup named with this pid that predates the
// process is another's, such as one of a stockade SIGKILLed long ago from
// a lock directory of its own, which no sweep ever finds.
func leftovers(pid int, before map[string]bool) []string {
	var left []string
	mark := "-" + strconv.Itoa(pid) + "-"
	for _, e := range stockadeEntries() {
		if strings.Contains(e, mark) && !before[e] {
			left = append(left, e)
		}
	}
	for _, p := range proctest.Children(pid) {
		left = append(left, "process "+p)
	}
	return left
}

// processesWith lists live processes whose command line contains mark.
func processesWith(mark string) []string {
	var found []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(mark)) {
			found = append(found, e.Name())
		}
	}
	return found
}

func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	within(t, 10*time.Second, what, f)
}

// within waits up to d for f to hold. A jail's kill must be seen well
// before its 10s timeout would end it anyway.
func within(t *testing.T, d time.Duration, what string, f func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); ; time.Sleep(50 * time.Millisecond) {
		if f() {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: not within %v", what, d)
			return
		}
	}
}

type netListenConfig struct{}

func (netListenConfig) listen(path string) (*net.UnixListener, error) {
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	l.SetUnlinkOnClose(false)
	return l, nil
}

// descendantsWith lists live descendants of pid whose command line
// contains mark: this test's own jails, never another server's.
func descendantsWith(pid int, mark string) []string {
	var found []string
	for _, p := range processesWith(mark) {
		for q, hops := p, 0; q != "" && hops < 8; hops++ {
			b, err := os.ReadFile(filepath.Join("/proc", q, "stat"))
			if err != nil {
				break
			}
			f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
			if len(f) < 2 {
				break
			}
			if f[1] == strconv.Itoa(pid) {
				found = append(found, p)
				break
			}
			q = f[1]
		}
	}
	return found
}
