package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image/png"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/internal/mounttest"
	"github.com/stockade/stockade/internal/proctest"
	"github.com/stockade/stockade/internal/testenv"
	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/pydata"
)

func TestServeHealthAndEndpoints(t *testing.T) {
	s := startServer(t, "--pool", "2")
	var h api.Health
	if c := s.get("/v1/health", &h); c != 200 {
		t.Fatalf("health: %d", c)
	}
	p := h.Pool["python"]
	if h.Status != "ok" || p.Target != 2 || p.Ready != 2 || len(h.Host) == 0 || !strings.Contains(strings.Join(h.Host, "\n"), "seccomp") {
		t.Errorf("health %+v", h)
	}
	if c := s.get("/v1/nothing", nil); c != 404 {
		t.Errorf("unknown path: %d", c)
	}
	if c := s.get("/v1/run", nil); c != 405 {
		t.Errorf("GET /v1/run: %d", c)
	}
	fi, err := os.Stat(s.sock)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o660 {
		t.Errorf("socket mode %v, %v; want a 0660 socket", fi.Mode(), err)
	}
}

func TestServeRunCodeAndArgv(t *testing.T) {
	s := startServer(t, "--pool", "1")
	r := s.run(api.RunRequest{Code: code("import sys\nprint(6*7)\nprint('e', file=sys.stderr)\nsys.exit(3)")})
	if r.Verdict != "exit" || r.ExitCode != 3 || r.Stdout != "42\n" || r.Stderr != "e\n" || !r.Pool.Hit {
		t.Errorf("code run: %+v", r)
	}
	r = s.run(api.RunRequest{Code: code("raise ValueError('boom')")})
	if r.ExitCode != 1 || !strings.Contains(r.Stderr, "ValueError: boom") || strings.Contains(r.Stderr, "_stockade") {
		t.Errorf("traceback: %q", r.Stderr)
	}
	r = s.run(api.RunRequest{Code: code("import atexit, threading, time, sys\natexit.register(lambda: print('atexit'))\nthreading.Thread(target=lambda: (time.sleep(0.2), print('thread'))).start()\nsys.exit('bye')")})
	if r.ExitCode != 1 || r.Stdout != "thread\natexit\n" || r.Stderr != "bye\n" {
		t.Errorf("exit as python's own: threads joined, atexit run, sys.exit(str): %+v", r)
	}
	r = s.run(api.RunRequest{Argv: []string{"sh", "-c", "read x; echo got $x; pwd"}, Stdin: "hello\n"})
	if r.Verdict != "ok" || r.Stdout != "got hello\n/work\n" {
		t.Errorf("argv run: %+v", r)
	}
	r = s.run(api.RunRequest{Argv: []string{"no-such-command"}})
	if r.ExitCode != 127 {
		t.Errorf("missing command: %+v", r)
	}
	s.waitReady()
	r = s.run(api.RunRequest{Code: code("while True: pass"), Limits: api.Limits{"timeout": "500ms"}})
	if r.Verdict != "timeout" || r.Pool.Hit != true {
		t.Errorf("a tighter timeout is taken by a pooled jail: %+v", r)
	}
	r = s.run(api.RunRequest{Code: code("print(open('/proc/self/cgroup').read() != '')"), Limits: api.Limits{"memory": "128M", "pids": 16}})
	if r.Verdict != "ok" || r.Pool.Hit || r.Limits.MemoryBytes == nil || *r.Limits.MemoryBytes != 128<<20 {
		t.Errorf("tighter cgroup limits need a jail of their own: %+v", r)
	}
}

// A pooled jail serves one request and is destroyed: what a run leaves in
// /tmp or /work is not there for the next; runs alive at the same time are
// in different pid namespaces, and each sees only its own processes.
func TestServePooledJailsAreSingleUse(t *testing.T) {
	s := startServer(t, "--pool", "2")
	for i := 0; i < 4; i++ {
		s.waitReady()
		r := s.run(api.RunRequest{Code: code(`import os
print(os.path.exists('/tmp/left'), os.path.exists('/work/left'))
open('/tmp/left', 'w').write('x'); open('/work/left', 'w').write('x')`)})
		if r.Verdict != "ok" || !r.Pool.Hit || r.Stdout != "False False\n" {
			t.Errorf("run %d: want a pooled jail and no earlier file: %q %+v", i, r.Stdout, r.Pool)
		}
	}
	var wg sync.WaitGroup
	ns := make(chan string, 4)
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := s.run(api.RunRequest{Code: code(`import os, time
procs = [p for p in os.listdir('/proc') if p.isdigit() and os.path.exists('/proc/%s/cmdline' % p) and open('/proc/%s/cmdline' % p).read()]
print(os.readlink('/proc/self/ns/pid'), len(procs))
time.sleep(0.5)`)})
			ns <- r.Stdout
		}()
	}
	wg.Wait()
	close(ns)
	seen := map[string]bool{}
	for out := range ns {
		f := strings.Fields(out)
		if len(f) != 2 || seen[f[0]] || f[1] != "2" {
			t.Errorf("want a pid namespace of its own with init and the program alone: %q", out)
			continue
		}
		seen[f[0]] = true
	}
}

func TestServeFilesInAndOut(t *testing.T) {
	s := startServer(t, "--pool", "1")
	in := map[string]string{"data.csv": b64("a,b\n1,2\n"), "keep.txt": b64("same")}
	r := s.run(api.RunRequest{Files: in, Code: code(`import os
print(open('data.csv').read().count(','))
open('data.csv', 'a').write('3,4\n')
os.makedirs('out/sub'); open('out/sub/r.txt', 'w').write('result')`)})
	if r.Verdict != "ok" || r.Stdout != "2\n" {
		t.Fatalf("%+v", r)
	}
	want := map[string]string{"data.csv": "a,b\n1,2\n3,4\n", "out/sub/r.txt": "result"}
	if len(r.Files) != len(want) {
		t.Errorf("files %v, want %v (keep.txt unchanged is not returned)", keys(r.Files), keys(want))
	}
	for name, w := range want {
		if got := unb64(r.Files[name]); got != w {
			t.Errorf("file %s: %q, want %q", name, got, w)
		}
	}
}

// The jailed code plants symlinks (to host secrets, to /, in loops), a
// FIFO and a huge file in /work: the server reads /work on the host side
// and must follow none of them, block on none, and return no secret.
func TestAttackSymlinksPlantedInWork(t *testing.T) {
	s := startServer(t, "--pool", "1", "--files-max", "1M")
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("HOST-SECRET"), 0o644)
	r := s.run(api.RunRequest{Code: code(fmt.Sprintf(`import os
os.symlink('/etc/shadow', 'shadow')
os.symlink(%q, 'secret')
os.symlink('/', 'root')
os.mkdir('d'); os.symlink('../../../../../etc', 'd/etc')
os.symlink('loop', 'loop')
os.mkfifo('fifo')
open('big', 'wb').write(b'x' * (2 << 20))
os.makedirs('.stockade-figures'); os.symlink('/etc/shadow', '.stockade-figures/000.png')
open('ok.txt', 'w').write('fine')`, secret))})
	if r.Verdict != "ok" {
		t.Fatalf("%+v", r)
	}
	if len(r.Files) != 1 || unb64(r.Files["ok.txt"]) != "fine" || len(r.Images) != 0 {
		t.Errorf("files %v images %d, want only ok.txt", keys(r.Files), len(r.Images))
	}
	shadow, _ := os.ReadFile("/etc/shadow")
	for name, data := range r.Files {
		got := unb64(data)
		if strings.Contains(got, "HOST-SECRET") || len(shadow) > 0 && strings.Contains(got, string(shadow[:min(len(shadow), 20)])) {
			t.Errorf("a host file came back as %s: %q", name, got)
		}
	}
	skipped := strings.Join(r.FilesSkipped, "\n")
	for _, n := range []string{"shadow", "secret", "root", "d/etc", "loop", "fifo", "big"} {
		if !strings.Contains(skipped, n+":") {
			t.Errorf("%s not reported as skipped: %q", n, skipped)
		}
	}
	if !r.FilesTruncated {
		t.Error("a file over the cap left out without files_truncated")
	}
}

func TestServePlotReturnsPNG(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-c", "import matplotlib").Run(); err != nil {
		t.Skip("matplotlib is not installed (python3-matplotlib)")
	}
	s := startServer(t, "--pool", "1")
	r := s.run(api.RunRequest{Code: code("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.figure()\nplt.bar([1, 2], [3, 4])\nplt.close(plt.figure())"),
		Limits: api.Limits{"timeout": "10s"}})
	if r.Verdict != "ok" || len(r.Images) != 2 {
		t.Fatalf("want 2 figures: verdict %s, %d images, stderr %q", r.Verdict, len(r.Images), r.Stderr)
	}
	for i, im := range r.Images {
		b, _ := base64.StdEncoding.DecodeString(im.Data)
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil || im.Type != "png" || img.Bounds().Dx() < 100 {
			t.Errorf("image %d: %v", i, err)
		}
	}
	if len(r.Files) != 0 {
		t.Errorf("matplotlib's caches came back as files: %v", keys(r.Files))
	}
	// The server's jails use the font cache every jail gets (package
	// pydata): matplotlib's config directory on the jail's /tmp, its
	// font list a link to the read-only cache, so a plot does not scan the
	// host's fonts in every run. A server that set its own MPLCONFIGDIR
	// would turn that cache off.
	r = s.run(api.RunRequest{Code: code(`import glob, os
import matplotlib.font_manager
print(os.environ.get("MPLCONFIGDIR"))
for f in glob.glob(os.path.join(os.environ.get("MPLCONFIGDIR", "/nonexistent"), "fontlist-*.json")):
    print(os.readlink(f))
`)})
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if r.Verdict != "ok" || len(lines) != 2 || lines[0] != pydata.MPLConfigDir || !strings.HasPrefix(lines[1], pydata.FontCacheDir+"/fontlist-") {
		t.Errorf("want MPLCONFIGDIR=%s holding a link into %s: verdict %s, stdout %q, stderr %q", pydata.MPLConfigDir, pydata.FontCacheDir, r.Verdict, r.Stdout, r.Stderr)
	}
}

func TestServeStreamsNDJSON(t *testing.T) {
	s := startServer(t, "--pool", "1")
	body, _ := json.Marshal(api.RunRequest{Code: code("import sys, time\nprint('one')\ntime.sleep(0.3)\nprint('two', file=sys.stderr)")})
	req, _ := http.NewRequest("POST", "http://stockade/v1/run", bytes.NewReader(body))
	req.Header.Set("Accept", api.NDJSON)
	resp, err := s.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != api.NDJSON {
		t.Fatalf("content type %q", ct)
	}
	var types []string
	var out, errs string
	var firstAt, resultAt time.Time
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var l struct{ Type, Data, Verdict string }
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if len(types) == 0 {
			firstAt = time.Now()
		}
		types = append(types, l.Type)
		switch l.Type {
		case "stdout":
			out += l.Data
		case "stderr":
			errs += l.Data
		case "result":
			resultAt = time.Now()
			if l.Verdict != "ok" {
				t.Errorf("result %s", sc.Text())
			}
		}
	}
	if out != "one\n" || errs != "two\n" || types[len(types)-1] != "result" {
		t.Errorf("stream %v: stdout %q stderr %q", types, out, errs)
	}
	if resultAt.Sub(firstAt) < 200*time.Millisecond {
		t.Errorf("stdout came %v before the end: not streamed", resultAt.Sub(firstAt))
	}
}

func TestServeBadInput(t *testing.T) {
	s := startServer(t, "--pool", "0", "--max-body", "64K")
	big := `{"code": "` + strings.Repeat("x", 70<<10) + `"}`
	for _, c := range []struct {
		name, body string
		status     int
	}{
		{"malformed", `{"code": "print(1)"`, 400},
		{"not an object", `[1]`, 400},
		{"trailing data", `{"code": "1"} {}`, 400},
		{"wrong type", `{"code": 5}`, 400},
		{"wrong type in limits", `{"code": "1", "limits": {"pids": "many"}}`, 422},
		{"limits not an object", `{"code": "1", "limits": [1]}`, 400},
		{"unknown limit", `{"code": "1", "limits": {"network": 1}}`, 400},
		{"null limit", `{"code": "1", "limits": {"memory": null}}`, 422},
		{"unknown field", `{"code": "1", "network": true}`, 400},
		{"neither code nor argv", `{}`, 400},
		{"both", `{"code": "1", "argv": ["true"]}`, 400},
		{"huge body", big, 413},
		{"dot dot", `{"code": "1", "files": {"..": "eA=="}}`, 400},
		{"slash", `{"code": "1", "files": {"../etc/x": "eA=="}}`, 400},
		{"NUL", `{"code": "1", "files": {"a\u0000b": "eA=="}}`, 400},
		{"not base64", `{"code": "1", "files": {"a": "%%%"}}`, 400},
		{"memory above ceiling", `{"code": "1", "limits": {"memory": "64G"}}`, 422},
		{"timeout above ceiling", `{"code": "1", "limits": {"timeout": "1h"}}`, 422},
		{"pids above ceiling", `{"code": "1", "limits": {"pids": 100000}}`, 422},
		{"negative cpus", `{"code": "1", "limits": {"cpus": -1}}`, 422},
		{"bad size", `{"code": "1", "limits": {"memory": "12 parsecs"}}`, 422},
		{"unknown profile", `{"code": "1", "profile": "root"}`, 400},
		{"profile path", `{"code": "1", "profile": "/etc/passwd"}`, 400},
	} {
		status, _, body := s.post(c.body)
		var e struct{ Error string }
		if status != c.status || json.Unmarshal(body, &e) != nil || e.Error == "" {
			t.Errorf("%s: %d %s, want %d with a JSON error", c.name, status, body, c.status)
		}
	}
	if r := s.run(api.RunRequest{Code: code("print('still fine')")}); r.Stdout != "still fine\n" {
		t.Errorf("after bad input: %+v", r)
	}
}

// A client that goes away mid-run gets its jail killed and reaped.
func TestServeClientDisconnectKillsJail(t *testing.T) {
	s := startServer(t, "--pool", "1")
	mark := fmt.Sprintf("stockade-disconnect-%d", time.Now().UnixNano())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		body, _ := json.Marshal(api.RunRequest{Argv: []string{"sh", "-c", "sleep 1000; : " + mark}})
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://stockade/v1/run", bytes.NewReader(body))
		if resp, err := s.hc.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	eventually(t, "the jail started", func() bool { return len(processesWith(mark)) > 0 })
	cancel()
	<-done
	// Well before the profile's 10s timeout would end it anyway.
	within(t, 3*time.Second, "the jail killed", func() bool { return len(processesWith(mark)) == 0 })
	eventually(t, "the run over", func() bool {
		var h api.Health
		s.get("/v1/health", &h)
		return h.Running == 0
	})
}

// Past the concurrency cap and the queue, a request gets 503 with
// Retry-After; past the per-caller cap, 429.
func TestServeCapacity(t *testing.T) {
	s := startServer(t, "--pool", "0", "--concurrency", "1", "--queue", "1", "--queue-wait", "1s")
	slow := api.RunRequest{Code: code("import time; time.sleep(3)")}
	var wg sync.WaitGroup
	statuses := make(chan int, 3)
	retry := make(chan string, 3)
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, hdr, _ := s.post(slow)
			statuses <- st
			retry <- hdr.Get("Retry-After")
		}()
		time.Sleep(200 * time.Millisecond)
	}
	wg.Wait()
	close(statuses)
	close(retry)
	got := map[int]int{}
	for st := range statuses {
		got[st]++
	}
	if got[200] != 1 || got[503] != 2 {
		t.Errorf("statuses %v: want one 200 and two 503 (one over the queue, one past its wait)", got)
	}
	hasRetry := false
	for r := range retry {
		hasRetry = hasRetry || r != ""
	}
	if !hasRetry {
		t.Error("503 without Retry-After")
	}

	p := startServer(t, "--pool", "0", "--per-caller", "1")
	go p.post(slow)
	time.Sleep(300 * time.Millisecond)
	if st, _, body := p.post(api.RunRequest{Code: code("1")}); st != 429 {
		t.Errorf("second run of one caller: %d %s, want 429", st, body)
	}
}

// The socket's group and the uid allow-list: another uid in the group can
// connect, and is refused with 403 unless allowed; the audit log has a
// line per run.
func TestServePeerCredAndAudit(t *testing.T) {
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("needs setpriv (util-linux)")
	}
	audit := filepath.Join(t.TempDir(), "audit.log")
	s := startServer(t, "--pool", "0", "--group", "nogroup", "--allow-uid", "4242", "--audit-log", audit)
	fi, _ := os.Stat(s.sock)
	if st := fi.Sys().(*syscall.Stat_t); st.Gid != 65534 {
		t.Errorf("socket group %d, want nogroup (65534)", st.Gid)
	}
	curlAs := func(uid string) string {
		out, _ := exec.Command("setpriv", "--reuid", uid, "--regid", "65534", "--clear-groups",
			"curl", "-s", "-w", " %{http_code}", "--unix-socket", s.sock, "-d", `{"code": "print(1)"}`, "http://x/v1/run").CombinedOutput()
		return string(out)
	}
	if out := curlAs("65534"); !strings.HasSuffix(out, " 403") || !strings.Contains(out, "uid 65534") {
		t.Errorf("uid 65534, not allowed: %s", out)
	}
	if out := curlAs("4242"); !strings.HasSuffix(out, " 200") {
		t.Errorf("uid 4242, allowed: %s", out)
	}
	r := s.run(api.RunRequest{Code: code("print(2)")})
	if r.Verdict != "ok" {
		t.Fatalf("%+v", r)
	}
	b, _ := os.ReadFile(audit)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 {
		t.Fatalf("audit log: %q", b)
	}
	var e AuditEntry
	if err := json.Unmarshal([]byte(lines[0]), &e); err != nil || e.UID != 4242 || e.Verdict != "ok" || len(e.CodeSHA256) != 64 || e.Limits.MemoryBytes == 0 {
		t.Errorf("audit line %s: %v", lines[0], err)
	}
}

// curl is a client nobody here wrote: docs/server.md's examples, as written.
func TestServeCurlAndCLIClient(t *testing.T) {
	s := startServer(t, "--pool", "1")
	o := proctest.Run(t, exec.Command("curl", "-s", "--unix-socket", s.sock, "-d", `{"code": "print(6*7)"}`, "http://x/v1/run"), runDeadline(""))
	if o.Err != nil || !strings.Contains(o.Stdout, `"stdout":"42\n"`) {
		t.Errorf("curl: %s %v", o.Stdout, o.Err)
	}
	cmd := exec.Command(os.Getenv("STOCKADE_BIN"), "run", "--server", s.sock, "--timeout", "5s", "--", "python3", "-c", "import sys; print(sys.stdin.read().upper()); sys.exit(4)")
	cmd.Stdin = strings.NewReader("abc")
	if o := proctest.Run(t, cmd, runDeadline("5s")); o.Code() != 4 || o.Stdout != "ABC\n" {
		t.Errorf("stockade run --server: exit %v, stdout %q, stderr %q", o.Err, o.Stdout, o.Stderr)
	}
	cmd = exec.Command(os.Getenv("STOCKADE_BIN"), "run", "--server", s.sock, "--memory", "64G", "--", "true")
	if out, _ := cmd.CombinedOutput(); cmd.ProcessState.ExitCode() != 125 || !bytes.Contains(out, []byte("ceiling")) {
		t.Errorf("over the ceiling: exit %d, %s", cmd.ProcessState.ExitCode(), out)
	}
}

// systemd socket activation: the socket comes as fd 3 with LISTEN_FDS; the
// server serves on it and leaves the file to systemd.
func TestServeSocketActivation(t *testing.T) {
	bin := needServer(t)
	sock := filepath.Join(socketDir(t), "act.sock")
	ln, err := (&netListenConfig{}).listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := ln.File()
	ln.Close()
	cmd := exec.Command("sh", "-c", `LISTEN_PID=$$ LISTEN_FDS=1 exec "$0" serve --socket /nonexistent/ignored --pool 0`, bin)
	cmd.ExtraFiles = []*os.File{f}
	var log bytes.Buffer
	cmd.Stderr = &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	hc := unixClient(sock)
	eventually(t, "activated server answers", func() bool {
		st, _, _ := postTo(t, hc, api.RunRequest{Code: code("print(1)")}, nil)
		return st == 200
	})
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	if _, err := os.Lstat(sock); err != nil {
		t.Errorf("the activated socket's file was removed (systemd owns it): %v\n%s", err, log.String())
	}
}

// kill -9 of the server: its jails die with it (their init has
// PR_SET_PDEATHSIG), and the next server's start sweeps the run
// directories and cgroups it left.
func TestServeKill9LeavesNothingAfterNextStart(t *testing.T) {
	bin := needServer(t)
	sock := filepath.Join(socketDir(t), "s.sock")
	a := startServerAt(t, bin, sock, "--pool", "2")
	go func() {
		// Ends with an error when the server is killed.
		b, _ := json.Marshal(api.RunRequest{Code: code("import time; time.sleep(30)")})
		if resp, err := a.hc.Post("http://stockade/v1/run", "application/json", bytes.NewReader(b)); err == nil {
			resp.Body.Close()
		}
	}()
	time.Sleep(500 * time.Millisecond)
	pid := a.cmd.Process.Pid
	a.cmd.Process.Kill()
	<-a.exited
	if len(leftovers(pid, a.before)) == 0 {
		t.Log("nothing left right after the kill (the test then proves little)")
	}
	b := startServerAt(t, bin, sock, "--pool", "2")
	eventually(t, "the killed server's leftovers swept", func() bool { return len(leftovers(pid, a.before)) == 0 })
	if left := leftovers(pid, a.before); len(left) > 0 {
		t.Errorf("after the next start: %v", left)
	}
	if r := b.run(api.RunRequest{Code: code("print(1)")}); r.Verdict != "ok" {
		t.Errorf("%+v", r)
	}
}

// Many runs at concurrency 8 leave nothing behind and all succeed.
// STOCKADE_SERVE_SOAK sets the count (make soak: 500).
func TestServeSoak(t *testing.T) {
	n := 40
	if v, err := strconv.Atoi(os.Getenv("STOCKADE_SERVE_SOAK")); err == nil && v > 0 {
		n = v
	}
	s := startServer(t, "--pool", "2", "--concurrency", "8", "--queue", "1000", "--queue-wait", "5m")
	rssBefore := rssKiB(s.cmd.Process.Pid)
	var wg sync.WaitGroup
	jobs := make(chan int)
	var mu sync.Mutex
	bad := []string{}
	hits := 0
	start := time.Now()
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				st, _, body := s.post(api.RunRequest{Code: code(fmt.Sprintf("print(%d)", i)), Files: map[string]string{"in": b64("x")}})
				var r api.RunResponse
				json.Unmarshal(body, &r)
				mu.Lock()
				if st != 200 || r.Result == nil || r.Verdict != "ok" || r.Stdout != fmt.Sprintf("%d\n", i) {
					bad = append(bad, fmt.Sprintf("run %d: %d %.300s", i, st, body))
				}
				if r.Pool.Hit {
					hits++
				}
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < n; i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	took := time.Since(start)
	if len(bad) > 0 {
		t.Errorf("%d of %d runs failed; first: %s", len(bad), n, bad[0])
	}
	rssAfter := rssKiB(s.cmd.Process.Pid)
	t.Logf("%d runs at concurrency 8 in %v (%.1f runs/s), %d from the pool; server RSS %d -> %d KiB", n, took.Round(time.Millisecond), float64(n)/took.Seconds(), hits, rssBefore, rssAfter)
	if rssAfter > rssBefore+64<<10 {
		t.Errorf("server RSS grew from %d to %d KiB over %d runs", rssBefore, rssAfter, n)
	}
	var h api.Health
	s.get("/v1/health", &h)
	if h.Running != 0 || h.Queued != 0 {
		t.Errorf("after the soak: %+v", h)
	}
	// stop (in Cleanup) checks that no run directory, cgroup or process is left.
}

// rssKiB is a process's resident set, from /proc.
func rssKiB(pid int) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return 0
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func unb64(s string) string {
	b, _ := base64.StdEncoding.DecodeString(s)
	return string(b)
}

func keys(m map[string]string) []string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	return k
}

// A pooled jail that dies while waiting is discarded and reported, never
// handed out: its interpreter is killed from the host, and the next
// request is still served.
func TestServePooledJailDiedWhileWaiting(t *testing.T) {
	s := startServer(t, "--pool", "1")
	s.killWaitingInterpreter()
	time.Sleep(300 * time.Millisecond)
	r := s.run(api.RunRequest{Code: code("print('served')")})
	if r.Verdict != "ok" || r.Stdout != "served\n" {
		t.Fatalf("%+v", r)
	}
	var h api.Health
	s.get("/v1/health", &h)
	if h.Pool["python"].DiedWaiting != 1 {
		t.Errorf("died_waiting %d, want 1", h.Pool["python"].DiedWaiting)
	}
	if !strings.Contains(s.logString(), "ended while waiting") {
		t.Errorf("not reported in the log:\n%s", s.logString())
	}
}

// killWaitingInterpreter kills, from the host, the one interpreter that
// waits in a pool of one (the font scan's jail ends soon).
func (s *testServer) killWaitingInterpreter() {
	s.t.Helper()
	var waiting []string
	eventually(s.t, "one waiting interpreter", func() bool {
		waiting = descendantsWith(s.cmd.Process.Pid, "_stockade_driver")
		return len(waiting) == 1
	})
	if len(waiting) != 1 {
		s.t.Fatalf("want one waiting interpreter, found %v", waiting)
	}
	pid, _ := strconv.Atoi(waiting[0])
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		s.t.Fatal(err)
	}
}

// Waiting jails count against the budget; a request that needs a jail of
// its own gets room by giving up a waiting one.
func TestServeBudgetEvictsWaitingJails(t *testing.T) {
	s := startServer(t, "--pool", "2", "--budget-memory", "1G")
	var h api.Health
	s.get("/v1/health", &h)
	if h.Budget["memory_used"] != 1<<30 {
		t.Errorf("two waiting jails of 512M: budget used %d", h.Budget["memory_used"])
	}
	r := s.run(api.RunRequest{Code: code("print(1)"), Limits: api.Limits{"memory": "256M"}})
	if r.Verdict != "ok" || r.Pool.Hit {
		t.Fatalf("%+v", r)
	}
	s.get("/v1/health", &h)
	if h.Pool["python"].Evicted < 1 || h.Budget["memory_used"] > 1<<30 {
		t.Errorf("after a cold run within a full budget: %+v", h)
	}
}

// SIGTERM lets a running jail finish within the grace period, and kills
// one that outlasts it; the server then exits, leaving nothing (stop
// checks).
func TestServeGracefulShutdown(t *testing.T) {
	s := startServer(t, "--pool", "1", "--grace", "5s")
	done := make(chan string, 1)
	go func() {
		_, _, body := postTo(t, s.hc, api.RunRequest{Code: code("import time; time.sleep(1); print('finished')")}, nil)
		done <- string(body)
	}()
	time.Sleep(400 * time.Millisecond)
	s.cmd.Process.Signal(syscall.SIGTERM)
	if body := <-done; !strings.Contains(body, `"stdout":"finished\n"`) {
		t.Errorf("a run within the grace period: %s", body)
	}
	s.stop()

	k := startServer(t, "--pool", "1", "--grace", "500ms")
	mark := fmt.Sprintf("stockade-grace-%d", time.Now().UnixNano())
	go func() {
		b, _ := json.Marshal(api.RunRequest{Argv: []string{"sh", "-c", "sleep 1000; : " + mark}})
		if resp, err := k.hc.Post("http://stockade/v1/run", "application/json", bytes.NewReader(b)); err == nil {
			resp.Body.Close()
		}
	}()
	eventually(t, "the jail started", func() bool { return len(processesWith(mark)) > 0 })
	begin := time.Now()
	k.stop()
	if took := time.Since(begin); took > 10*time.Second {
		t.Errorf("shutdown took %v with a 500ms grace", took)
	}
	if left := processesWith(mark); len(left) > 0 {
		t.Errorf("jail processes after shutdown: %v", left)
	}
}

// A jail that died while waiting is closed in the background when a
// request finds it, and SIGTERM may come before that close is done: Serve
// must still return only once every jail, cgroup and run directory is
// gone (stop checks). The dead jail's run directory is given many files,
// so that its removal takes a while; and the budget holds one jail, so
// the request, which cannot get room while the discarded jail holds its
// share, is refused at once, and SIGTERM comes during that close.
func TestServeShutdownWaitsForDiscardedJail(t *testing.T) {
	s := startServer(t, "--pool", "1", "--budget-memory", "512M", "--queue-wait", "1ms")
	s.killWaitingInterpreter()
	eventually(t, "the jail's init reaped", func() bool { return len(proctest.Children(s.cmd.Process.Pid)) == 0 })
	dirs := leftovers(s.cmd.Process.Pid, s.before)
	if len(dirs) == 0 || !strings.HasPrefix(dirs[0], "run dir ") {
		t.Fatalf("the dead jail's run directory not found: %v", dirs)
	}
	junk := filepath.Join(jail.RunBase(), strings.TrimPrefix(dirs[0], "run dir "), "junk")
	if err := os.Mkdir(junk, 0o700); err != nil {
		t.Fatal(err)
	}
	for i := range 5000 {
		if err := os.WriteFile(filepath.Join(junk, strconv.Itoa(i)), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	status, _, body := s.post(api.RunRequest{Code: code("print(1)")})
	s.stop()
	if status != 503 {
		t.Errorf("the request got %d %s, want 503: the discarded jail's close was over before SIGTERM, and this test proved nothing", status, body)
	}
	if !strings.Contains(s.logString(), "ended while waiting") {
		t.Errorf("the dead jail was not discarded:\n%s", s.logString())
	}
}

// A jail's close that cannot remove everything (here a mount pins its run
// directory, as a kernel slow to let go of a cgroup would pin that) is
// logged, and shutdown tries again until it can: Serve returns with
// nothing left (stop checks), and says what it did.
func TestServeShutdownRetriesWhatACloseLeft(t *testing.T) {
	s := startServer(t, "--pool", "1")
	dirs := leftovers(s.cmd.Process.Pid, s.before)
	if len(dirs) == 0 || !strings.HasPrefix(dirs[0], "run dir ") {
		t.Fatalf("the waiting jail's run directory not found: %v", dirs)
	}
	pin := filepath.Join(jail.RunBase(), strings.TrimPrefix(dirs[0], "run dir "), "pin")
	unpin := mounttest.Pin(t, pin)
	s.cmd.Process.Signal(syscall.SIGTERM)
	eventually(t, "the failed close logged", func() bool { return strings.Contains(s.logString(), "left something behind") })
	time.Sleep(300 * time.Millisecond)
	select {
	case <-s.exited:
		t.Fatalf("the server exited with its jail's run directory still there:\n%s", s.logString())
	default:
	}
	if err := unpin(); err != nil {
		t.Fatal(err)
	}
	s.stop()
	if log := s.logString(); !strings.Contains(log, "removing what jails' closes left behind, for up to") || !strings.Contains(log, "stopped: every jail, cgroup and run directory removed") {
		t.Errorf("the retry is not in the log:\n%s", log)
	}
}

// leftovers blames a server only for what appeared after it started: pids
// are reused, and a run directory named with this pid that was there
// before (CI once had one from a stockade SIGKILLed long before, from a
// lock directory of its own that no sweep reads) is another's.
func TestLeftoversIgnoreWhatPredatesTheServer(t *testing.T) {
	testenv.NeedRoot(t, "plants a directory in root's run base")
	if err := os.MkdirAll(jail.RunBase(), 0o711); err != nil {
		t.Fatal(err)
	}
	pid := os.Getpid()
	old := filepath.Join(jail.RunBase(), fmt.Sprintf("r99-%d-predates", pid))
	if err := os.Mkdir(old, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(old) })
	before := entrySet()
	fresh := filepath.Join(jail.RunBase(), fmt.Sprintf("r98-%d-fresh", pid))
	if err := os.Mkdir(fresh, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(fresh) })
	left := strings.Join(leftovers(pid, before), " ")
	if strings.Contains(left, filepath.Base(old)) || !strings.Contains(left, filepath.Base(fresh)) {
		t.Errorf("leftovers: %s; want %s and not %s", left, filepath.Base(fresh), filepath.Base(old))
	}
}
