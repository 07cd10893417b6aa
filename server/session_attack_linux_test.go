package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/server/internal/kernel"
)

// These attacks come from inside a session's jail, at the driver's
// channel and the server's reading of /work: what a cell sends or leaves
// must be bounded, charged and checked from outside before the server
// holds it or repeats it as fact (issue 28).

// cellFrames is Python a cell uses to speak the driver's protocol: tok()
// finds the running exec's token in the driver's own frames, frame()
// makes one frame of an object, forge() sends one on the driver's
// descriptor.
const cellFrames = `import json, os, socket, sys, time
def tok():
    f = sys._getframe()
    while f is not None and not (isinstance(f.f_locals.get("req"), dict) and "token" in f.f_locals["req"]):
        f = f.f_back
    return f.f_locals["req"]["token"]
def frame(o):
    b = json.dumps(o).encode()
    return b"%d\n" % len(b) + b
def answer(t, result="'forged'"):
    return {"token": t, "status": "ok", "result": result, "result_truncated": False, "error": None, "images": [], "images_truncated": False}
def forge(o):
    socket.socket(fileno=os.dup(3)).sendall(frame(o))
`

// fakeDriver is a program that answers the driver's protocol on fd 3 with
// made-up results for code it never runs.
const fakeDriver = `import json, os, socket, sys
s = socket.socket(fileno=3)
def send(o):
    b = json.dumps(o).encode()
    s.sendall(b"%d\n" % len(b) + b)
def answer(t):
    send({"token": t, "status": "ok", "result": "'forged'", "result_truncated": False, "error": None, "images": [], "images_truncated": False})
answer(sys.argv[1])
buf = b""
while True:
    data, anc, _, _ = s.recvmsg(1 << 16, socket.CMSG_SPACE(64))
    if not data:
        os._exit(0)
    for level, kind, payload in anc:
        for i in range(0, len(payload) - len(payload) % 4, 4):
            os.close(int.from_bytes(payload[i:i + 4], sys.byteorder))
    buf += data
    while b"\n" in buf:
        head, _, rest = buf.partition(b"\n")
        if len(rest) < int(head):
            break
        req, buf = json.loads(rest[:int(head)]), rest[int(head):]
        send({"started": req["token"]})
        answer(req["token"])
`

// A cell clears close-on-exec on the driver's descriptor and execs a fake
// driver in its place: same pid, same channel, every later answer "ok"
// with output for code that never ran. The server checks, from outside,
// that the process is still the program it started.
func TestAttackCellReplacesDriver(t *testing.T) {
	s := startServer(t, "--pool", "1")
	id := s.session(api.SessionRequest{}).SessionID
	s.cell(id, "x = 1")
	cell := cellFrames + fmt.Sprintf("FAKE = %q\nt = tok()\nos.set_inheritable(3, True)\nos.execv(sys.executable, [sys.executable, '-c', FAKE, t])\n", fakeDriver)
	r := s.exec(id, api.ExecRequest{Code: &cell, Timeout: "5s"})
	if r.Verdict != api.ExecFailed || r.State != "lost" || resultIs(r, "'forged'") || r.Session.Alive || !strings.Contains(r.Why, "replaced") {
		t.Errorf("the exec that replaced the driver: %+v, want verdict error, state lost, why naming the replacement", r)
	}
	code, body := s.call("POST", "/v1/sessions/"+id+"/exec", api.ExecRequest{Code: ptr("x")}, nil)
	if code != 410 || bytes.Contains(body, []byte("forged")) {
		t.Errorf("an exec after the replacement: %d %s, want 410", code, body)
	}
}

// A process the cell forked keeps the driver's descriptor (close-on-exec
// is not close-on-fork) and answers the running exec before the driver
// does: the kernel's credentials on its bytes name another process.
func TestAttackForkedChildAnswersForDriver(t *testing.T) {
	s := startServer(t, "--pool", "1")
	id := s.session(api.SessionRequest{}).SessionID
	// The child's frame is in the channel before the driver's answer: the
	// parent waits for it.
	cell := cellFrames + "t = tok()\npid = os.fork()\nif pid == 0:\n    forge(answer(t))\n    os._exit(0)\nos.waitpid(pid, 0)\n'real'"
	r := s.exec(id, api.ExecRequest{Code: &cell, Timeout: "5s"})
	if resultIs(r, "'forged'") || r.Verdict != api.ExecFailed || r.State != "lost" || r.Session.Alive {
		t.Errorf("a child's answer in the driver's name: %+v, want verdict error, state lost", r)
	}
}

// A thread the cell left behind writes a frame of 8 MiB after its exec
// answered: nobody asked for it, so the server ends the session rather
// than hold it for the session's life.
func TestAttackUnrequestedFramesHeld(t *testing.T) {
	s := startServer(t, "--pool", "1")
	id := s.session(api.SessionRequest{}).SessionID
	// The thread writes once the driver is done with the cell (its own
	// _state says so) and has had a second to answer.
	cell := cellFrames + `import threading
g = sys._getframe()
while "_state" not in g.f_globals:
    g = g.f_back
st = g.f_globals["_state"]
def later():
    while st["user"]:
        time.sleep(0.05)
    time.sleep(1)
    forge(answer("x" * 32, "r" * (8 << 20)))
threading.Thread(target=later).start()
`
	if r := s.exec(id, api.ExecRequest{Code: &cell}); r.Verdict != api.ExecOK || r.State != "kept" {
		t.Fatalf("the exec that starts the thread: %+v", r)
	}
	var in api.SessionInfo
	eventually(t, "the session ended by the unrequested frame", func() bool {
		code, i := s.info(id)
		in = i
		return code != 200 || !i.Alive
	})
	if in.Alive || in.Verdict != api.SessionFailed || !strings.Contains(in.Why, "no exec asked for") {
		t.Errorf("the session after an unrequested frame: %+v", in)
	}
}

// A forged answer (the cell writes it, with its exec's token) says what
// it likes; the server holds no more of it than the documented caps: the
// result and the error's texts at 256K characters, the figures at
// maxImages and --files-max, and says it cut them.
func TestAttackForgedAnswerPastCaps(t *testing.T) {
	s := startServer(t, "--pool", "1")
	c := s.session(api.SessionRequest{})
	cell := cellFrames + `import base64
png = base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()
a = answer(tok(), "r" * (6 << 20))
a["status"] = "exception"
a["error"] = {"name": "E" * (300 << 10), "value": "\u00e9" * (1 << 20), "traceback": ""}
a["images"] = [png] * 300 + ["not base64!"] * 100000
forge(a)
time.sleep(3)
`
	r := s.exec(c.SessionID, api.ExecRequest{Code: &cell, Timeout: "8s"})
	want := min(c.Limits.OutputBytes, 256<<10)
	if r.Result == nil || int64(utf8.RuneCountInString(*r.Result)) != want || !r.ResultTruncated {
		n := -1
		if r.Result != nil {
			n = len(*r.Result)
		}
		t.Errorf("result of %d bytes, truncated %v: want %d characters, truncated", n, r.ResultTruncated, want)
	}
	if e := r.Error; e == nil || int64(utf8.RuneCountInString(e.Value)) != want || int64(len(e.Name)) != want || !e.Truncated {
		t.Errorf("error past the cap: want value and name of %d characters, truncated", want)
	}
	if len(r.Images) != maxImages || !r.ImagesTruncated {
		t.Errorf("%d images, truncated %v: want %d, truncated", len(r.Images), r.ImagesTruncated, maxImages)
	}
}

// One write of "100000000000\n" to the driver's descriptor announces a
// frame of 100 GB: refused by its size, before a byte is allocated, and
// the server (every other session with it) lives on.
func TestAttackDriverFrameHeaderHuge(t *testing.T) {
	s := startServer(t, "--pool", "1")
	other := s.session(api.SessionRequest{}).SessionID
	s.cell(other, "x = 6")
	id := s.session(api.SessionRequest{}).SessionID
	r := s.exec(id, api.ExecRequest{Code: ptr("import os, time\nos.write(3, b'100000000000\\n')\ntime.sleep(2)"), Timeout: "5s"})
	if r.Verdict != api.ExecFailed || r.State != "lost" || !strings.Contains(r.Why, "more than the") {
		t.Errorf("a 100 GB frame header: %+v", r)
	}
	if h := s.get("/v1/health", nil); h != 200 {
		t.Fatalf("health after a 100 GB frame header: %d\n%s", h, s.logString())
	}
	if r := s.cell(other, "x * 7"); !resultIs(r, "42") {
		t.Errorf("another session after it: %+v", r)
	}
}

// A session whose limits are tighter than the pool's never takes a pooled
// jail: a 128M session runs in a 128M jail, not the pool's 512M.
func TestAttackTightSessionTakesPooledJail(t *testing.T) {
	s := startServer(t, "--pool", "1")
	c := s.session(api.SessionRequest{Limits: api.Limits{"memory": "128M"}})
	if c.Pool.Hit || c.Limits.MemoryBytes != 128<<20 {
		t.Errorf("a 128M session: %+v, want no pool hit", c)
	}
	r := s.exec(c.SessionID, api.ExecRequest{Code: ptr("b = b'x' * (320 << 20)\nlen(b)")})
	if r.Verdict != api.ExecMemory {
		t.Errorf("320 MiB in a 128M session: %+v, want verdict memory", r)
	}
}

// --audit-required: an exec whose start line cannot be written never
// reaches the interpreter (a 8 KiB tmpfs of the server's own, filled
// once the session is made).
func TestAttackExecWithoutAuditLine(t *testing.T) {
	bin := needServer(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare (util-linux)")
	}
	dir := t.TempDir()
	sock := filepath.Join(socketDir(t), "s.sock")
	script := `mount -t tmpfs -o size=64k,mode=0700 tmpfs "$1" && exec "$2" serve --socket "$3" --pool 0 --audit-log "$1/audit.log" --audit-required`
	s := startServerCmd(t, sock, exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", dir, bin, sock))
	inServer := func(p string) string { return fmt.Sprintf("/proc/%d/root%s", s.cmd.Process.Pid, p) }
	id := s.session(api.SessionRequest{}).SessionID
	// The log's last page is padded full (with a line of its own), so that
	// the next line needs a page the filled tmpfs no longer has.
	log := inServer(filepath.Join(dir, "audit.log"))
	st, err := os.Stat(log)
	if err != nil {
		t.Fatal(err)
	}
	if pad := (4096 - st.Size()%4096) % 4096; pad > 0 {
		lf, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		lf.Write(append(bytes.Repeat([]byte{'#'}, int(pad-1)), '\n'))
		lf.Close()
	}
	filler := inServer(filepath.Join(dir, "filler"))
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := f.Write(make([]byte, 4096)); err != nil {
			break
		}
	}
	f.Close()
	code, body := s.call("POST", "/v1/sessions/"+id+"/exec", api.ExecRequest{Code: ptr("open('/work/ran', 'w').write('ran')")}, nil)
	if code != 503 || !bytes.Contains(body, []byte("--audit-required")) {
		t.Errorf("an exec whose start line cannot be written: %d %s, want 503", code, body)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if code, _ := s.call("GET", "/v1/sessions/"+id+"/files/ran", nil, nil); code != 404 {
		t.Errorf("the refused cell ran: GET /work/ran: %d", code)
	}
	if r := s.cell(id, "6 * 7"); !resultIs(r, "42") || r.ExecutionCount != 1 {
		t.Errorf("the next exec, with room: %+v", r)
	}
}

// Names that are not UTF-8 are two files, not one U+FFFD: in the session's
// listing and in files_changed, written as /v1/run writes them.
func TestAttackSessionNonUTF8NamesCollide(t *testing.T) {
	s := startServer(t, "--pool", "1")
	id := s.session(api.SessionRequest{}).SessionID
	code, body := s.call("POST", "/v1/sessions/"+id+"/exec", api.ExecRequest{Code: ptr("for b in (b'\\xfe', b'\\xff'):\n    open(b'/work/' + b, 'w').write('x')")}, nil)
	if code != 200 || !bytes.Contains(body, []byte(`"files_changed":["\udcfe","\udcff"]`)) {
		t.Errorf("files_changed of \\xfe and \\xff: %d %s", code, body)
	}
	code, body = s.call("GET", "/v1/sessions/"+id+"/files?path=.", nil, nil)
	if code != 200 || !bytes.Contains(body, []byte(`"name":"\udcfe"`)) || !bytes.Contains(body, []byte(`"name":"\udcff"`)) {
		t.Errorf("the listing of \\xfe and \\xff: %d %s", code, body)
	}
}

// A changed file deeper than PATH_MAX is not skipped in silence: the
// files routes cannot name it, and files_changed says it is not whole.
func TestAttackFilesChangedPastPathMax(t *testing.T) {
	s := startServer(t, "--pool", "1")
	id := s.session(api.SessionRequest{}).SessionID
	r := s.cell(id, "import os\nos.chdir('/work')\nfor i in range(20):\n    os.mkdir('d' * 250)\n    os.chdir('d' * 250)\nopen('deep', 'w').write('x')")
	if r.Verdict != api.ExecOK || !r.FilesChangedTruncated {
		t.Errorf("a file written 5000 bytes deep: %+v, want files_changed_truncated", r)
	}
}

// /work is walked once per exec, within bounds: 10,000 entries with paths
// of 3.8 KB cost the server no more than its list of 1000 (the walk used
// to hold every path twice: ~100 MB for an exec of pass), and a walk that
// stops at its entry bound says so.
func TestAttackWorkWalkHoldsEveryPath(t *testing.T) {
	s := startServer(t, "--pool", "0")
	id := s.session(api.SessionRequest{}).SessionID
	hwm := func() int64 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
				n, _ := strconv.ParseInt(f[1], 10, 64)
				return n << 10
			}
		}
		t.Fatal("no VmHWM")
		return 0
	}
	before := hwm()
	r := s.exec(id, api.ExecRequest{Code: ptr("import os\nd = '/work/' + '/'.join(['d' * 250] * 15)\nos.makedirs(d)\nfor i in range(10050):\n    open('%s/f%05d' % (d, i), 'w').close()")})
	if r.Verdict != api.ExecOK || len(r.FilesChanged) != 1000 || !r.FilesChangedTruncated {
		t.Errorf("10,050 files made: %s, %d listed, truncated %v", r.Verdict, len(r.FilesChanged), r.FilesChangedTruncated)
	}
	if r := s.cell(id, "pass"); r.Verdict != api.ExecOK || len(r.FilesChanged) != 0 || !r.FilesChangedTruncated {
		t.Errorf("pass over 10,050 files: %+v, want nothing listed and truncated (the walk's entry bound)", r)
	}
	grew := hwm() - before
	t.Logf("the server's peak memory grew by %.1f MiB", float64(grew)/(1<<20))
	if grew > 48<<20 {
		t.Errorf("the server's peak memory grew by %d MiB over two execs (bound: 48)", grew>>20)
	}
}

// At SIGTERM a streamed exec is told the server is shutting down, and
// that its state is lost with the session, not that its caller went away.
func TestAttackShutdownSaysCallerWentAway(t *testing.T) {
	s := startServer(t, "--pool", "1", "--grace", "1s")
	id := s.session(api.SessionRequest{}).SessionID
	b, _ := json.Marshal(api.ExecRequest{Code: ptr("print('up', flush=True)\nimport time\ntime.sleep(60)")})
	req, _ := http.NewRequest("POST", "http://stockade/v1/sessions/"+id+"/exec", bytes.NewReader(b))
	req.Header.Set("Accept", api.NDJSON)
	resp, err := s.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(nil, 1<<20)
	if !lines.Scan() {
		t.Fatalf("no first line: %v", lines.Err())
	}
	// SIGTERM, as stop sends it; stop then waits and checks what is left.
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var res api.ExecResult
	for lines.Scan() {
		if json.Unmarshal(lines.Bytes(), &res) == nil && res.Type == "result" {
			break
		}
	}
	if res.Type != "result" || res.State != "lost" || strings.Contains(res.Why, "caller went away") || !strings.Contains(res.Why, "shutting down") {
		t.Errorf("the streamed exec at SIGTERM: %+v", res)
	}
	s.stop()
}

// A driver whose arguments begin within 16 MiB of the top of the address
// space could be matched by a program exec'd with ASLR off (its stack's
// top is that top, and execve takes at most 6 MiB of arguments): such a
// draw is forgeable; one a few GiB down, as ASLR usually draws, is not.
func TestDriverImageForgeable(t *testing.T) {
	for _, c := range []struct {
		argStart uint64
		want     bool
	}{
		{0x7ffffffff000 - 0x1000, true},  // x86-64 with ASLR off: the top, less a page
		{0x800000000000 - 15<<20, true},  // within the window
		{0x800000000000 - 17<<20, false}, // past it
		{0x7ffc12345000, false},          // a usual draw, 14 GiB down
		{1<<48 - 4<<20, true},            // arm64's top
	} {
		var img kernel.Image
		img[6] = c.argStart
		if got := img.Forgeable(); got != c.want {
			t.Errorf("arg_start %#x: forgeable %v, want %v", c.argStart, got, c.want)
		}
	}
}

// With ASLR off for the server (setarch -R, inherited by every jail) each
// driver is forgeable: sessions are still made, and the log says the
// check proves nothing there.
func TestSessionASLROffIsSaid(t *testing.T) {
	bin := needServer(t)
	if _, err := exec.LookPath("setarch"); err != nil {
		t.Skip("needs setarch (util-linux)")
	}
	sock := filepath.Join(socketDir(t), "s.sock")
	s := startServerCmd(t, sock, exec.Command("setarch", "-R", bin, "serve", "--socket", sock, "--pool", "1"))
	if r := s.cell(s.session(api.SessionRequest{}).SessionID, "6 * 7"); !resultIs(r, "42") {
		t.Errorf("a session with ASLR off: %+v", r)
	}
	if !strings.Contains(s.logString(), "ASLR is off") {
		t.Errorf("the log does not say ASLR is off:\n%s", s.logString())
	}
}
