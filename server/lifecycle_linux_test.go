package server

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/api"
)

// A session's lifecycle past its making (session_lifecycle_linux.go): its
// lifetime moved, an exec's own environment, the interpreter restarted
// with /work kept, and the session ceilings serve takes as flags.

// POST .../ttl moves the end of a session, within --session-ttl from now
// and --session-max-life from its start; the jail's own clock allows it.
func TestSessionTTLExtend(t *testing.T) {
	s := startServer(t, "--pool", "1", "--session-ttl", "8s", "--session-max-life", "20s")
	c := s.session(api.SessionRequest{TTL: "4s"})
	id := c.SessionID
	ttl := func(v string) (int, []byte) {
		return s.call("POST", "/v1/sessions/"+id+"/ttl", api.TTLRequest{TTL: v}, nil)
	}
	code, body := ttl("8s")
	var in api.SessionInfo
	if code != 200 || json.Unmarshal(body, &in) != nil || !in.ExpiresAt.After(c.ExpiresAt) || !in.Alive {
		t.Fatalf("ttl 8s: %d %s (made to expire at %v)", code, body, c.ExpiresAt)
	}
	for _, bad := range []struct {
		ttl  string
		code int
		says string
	}{{"9s", 422, "--session-ttl"}, {"soon", 400, "ttl"}, {"0s", 400, "positive"}, {"", 400, "missing"}} {
		if code, body := ttl(bad.ttl); code != bad.code || !bytes.Contains(body, []byte(bad.says)) {
			t.Errorf("ttl %q: %d %s", bad.ttl, code, body)
		}
	}
	if code, body := s.call("POST", "/v1/sessions/"+id+"/ttl", []byte(`{"ttl": "3s", "extra": 1}`), nil); code != 400 {
		t.Errorf("an unknown field: %d %s", code, body)
	}
	s.cell(id, "x = 'kept'")
	// Past the ttl it was made with, and past the jail's own clock as it
	// would be set from that ttl (ttl + 1s), the session lives and keeps
	// its state.
	time.Sleep(time.Until(c.CreatedAt.Add(6 * time.Second)))
	if r := s.cell(id, "x"); r.Verdict != api.ExecOK || !resultIs(r, "'kept'") || !r.Session.ExpiresAt.Equal(in.ExpiresAt) {
		t.Fatalf("after the ttl it was made with: %+v", r)
	}
	// Moved again it may not pass --session-max-life from its start.
	if code, body := ttl("8s"); code != 200 {
		t.Errorf("ttl 8s again, within the max life: %d %s", code, body)
	}
	time.Sleep(time.Until(c.CreatedAt.Add(12500 * time.Millisecond)))
	if code, body := ttl("8s"); code != 422 || !bytes.Contains(body, []byte("--session-max-life")) {
		t.Errorf("past the max life: %d %s", code, body)
	}
	if r := s.cell(id, "x"); !resultIs(r, "'kept'") {
		t.Errorf("after the refusal: %+v", r)
	}
	// Shorter is allowed: the janitor ends it then, verdict ttl.
	if code, body := ttl("1s"); code != 200 {
		t.Errorf("ttl 1s: %d %s", code, body)
	}
	within(t, 10*time.Second, "the session ends at its shortened ttl", func() bool {
		code, body := s.call("POST", "/v1/sessions/"+id+"/exec", api.ExecRequest{Code: ptr("x")}, nil)
		return code == 410 && bytes.Contains(body, []byte("(ttl)"))
	})
	if code, body := ttl("2s"); code != 410 {
		t.Errorf("ttl of an ended session: %d %s", code, body)
	}
}

func TestServeSessionFlagsRefused(t *testing.T) {
	bin := needServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, args := range [][]string{
		{"--session-ttl", "1h", "--session-max-life", "10m"},
		{"--session-timeout", "0s"},
		{"--session-cpu-time", "soon"},
	} {
		cmd := exec.CommandContext(ctx, bin, append([]string{"serve", "--socket", filepath.Join(t.TempDir(), "s.sock")}, args...)...)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), args[len(args)-2]) {
			t.Errorf("serve %v: %v %s", args, err, out)
		}
	}
}

// An exec's env is the cell's alone, seen by the processes it starts,
// and put back after it; the names stockade relies on are refused.
func TestSessionExecEnv(t *testing.T) {
	s := startServer(t, "--pool", "1")
	id := s.session(api.SessionRequest{Env: map[string]string{"SHARED": "session"}}).SessionID
	probe := "import os, subprocess\nprint(os.environ.get('API_KEY'), os.environ.get('SHARED'), subprocess.run(['sh', '-c', 'echo $API_KEY'], capture_output=True, text=True).stdout.strip())"
	// ENV_NAME and APP_ENV: ENV is refused as a whole name, not a part.
	r := s.exec(id, api.ExecRequest{Code: &probe, Env: map[string]string{"API_KEY": "k-1", "SHARED": "exec", "ENV_NAME": "a", "APP_ENV": "b"}})
	if r.Verdict != api.ExecOK || r.Stdout != "k-1 exec k-1\n" {
		t.Errorf("with env: %+v", r)
	}
	if r := s.exec(id, api.ExecRequest{Code: &probe}); r.Verdict != api.ExecOK || r.Stdout != "None session \n" {
		t.Errorf("the next exec, without: %+v", r)
	}
	many := map[string]string{}
	for i := 0; i <= maxExecEnvVars; i++ {
		many["V"+strings.Repeat("x", i)] = "1"
	}
	for name, env := range map[string]map[string]string{
		"LD_PRELOAD": {"LD_PRELOAD": "/work/x.so"}, "PYTHONPATH": {"PYTHONPATH": "/work"}, "https_proxy": {"https_proxy": "http://x"},
		"MPLCONFIGDIR": {"MPLCONFIGDIR": "/work"}, "digit first": {"1X": "a"}, "=": {"A=B": "c"}, "empty name": {"": "a"},
		"NUL": {"A": "a\x00b"}, "too many": many, "too big": {"BIG": strings.Repeat("b", maxExecEnvBytes)},
		// Start-up code and trust of the programs a cell starts.
		"BASH_ENV": {"BASH_ENV": "/work/x.sh"}, "ENV": {"ENV": "/work/x.sh"}, "GLIBC_TUNABLES": {"GLIBC_TUNABLES": "glibc.malloc.check=0"},
		"GCONV_PATH": {"GCONV_PATH": "/work"}, "OPENSSL_CONF": {"OPENSSL_CONF": "/work/o.cnf"}, "SSL_CERT_FILE": {"SSL_CERT_FILE": "/work/ca.pem"},
		"SSL_CERT_DIR": {"SSL_CERT_DIR": "/work"}, "NODE_OPTIONS": {"NODE_OPTIONS": "--require /work/x.js"}, "PERL5OPT": {"PERL5OPT": "-Mx"},
		"REQUESTS_CA_BUNDLE": {"REQUESTS_CA_BUNDLE": "/work/ca.pem"}, "curl_ca_bundle": {"curl_ca_bundle": "/work/ca.pem"},
	} {
		code, body := s.call("POST", "/v1/sessions/"+id+"/exec", api.ExecRequest{Code: ptr("1"), Env: env}, nil)
		if code != 400 || !bytes.Contains(body, []byte("env")) {
			t.Errorf("%s: %d %s", name, code, body)
		}
	}
	if r := s.exec(id, api.ExecRequest{Code: &probe}); r.ExecutionCount != 3 {
		t.Errorf("a refused exec ran: %+v", r)
	}
}

// A session's env is held by the server for the session's whole life
// (each restart starts the interpreter with it again): a create with a
// value as big as --max-body, or hundreds of names, is refused before the
// server keeps it, and the largest env allowed still reaches the cell.
func TestAttackSessionEnvHeldUnbounded(t *testing.T) {
	s := startServer(t, "--pool", "0")
	many := map[string]string{}
	for i := 0; i <= maxExecEnvVars; i++ {
		many["V"+strings.Repeat("x", i)] = "1"
	}
	for name, env := range map[string]map[string]string{
		"a big value": {"A": strings.Repeat("x", 4<<20)},
		"just over":   {"A": strings.Repeat("x", maxExecEnvBytes)},
		"too many":    many,
		"a long name": {strings.Repeat("N", maxEnvName+1): "1"},
	} {
		code, body := s.call("POST", "/v1/sessions", api.SessionRequest{Env: env}, nil)
		if code != 400 || !bytes.Contains(body, []byte("env")) {
			t.Errorf("%s: %d %.200s", name, code, body)
		}
	}
	var list struct{ Sessions []api.SessionInfo }
	if code := s.get("/v1/sessions", &list); code != 200 || len(list.Sessions) != 0 {
		t.Errorf("sessions after refused creates: %d %+v", code, list)
	}
	id := s.session(api.SessionRequest{Env: map[string]string{"A": strings.Repeat("y", maxExecEnvBytes-1)}}).SessionID
	if r := s.cell(id, "import os\nlen(os.environ['A'])"); r.Result == nil || *r.Result != strconv.Itoa(maxExecEnvBytes-1) {
		t.Errorf("the largest env: %+v", r)
	}
}

// POST .../restart: the same session with a fresh interpreter, its /work
// and /tmp kept, its environment the session's again, every process the
// cells started gone.
func TestSessionRestartKeepsWork(t *testing.T) {
	s := startServer(t, "--pool", "1")
	id := s.session(api.SessionRequest{Env: map[string]string{"SHARED": "session"}}).SessionID
	fds := "sorted(os.listdir('/proc/self/fd'))"
	before := s.cell(id, "import os\n"+fds)
	r := s.cell(id, "fd = os.open('/work', os.O_RDONLY)\nos.set_inheritable(fd, True)\nfd")
	if before.Result == nil || r.Result == nil {
		t.Fatalf("an inheritable descriptor: %+v then %+v", before, r)
	}
	r = s.cell(id, "import os, signal, subprocess\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nx = 1\nopen('/work/a.txt', 'w').write('kept')\nopen('/tmp/t.txt', 'w').write('tmp')\n"+
		"os.environ['CELL_SET'] = 'cell'\np = subprocess.Popen(['sleep', '1000'])\np.pid")
	if r.Verdict != api.ExecOK || r.Result == nil {
		t.Fatalf("set-up: %+v", r)
	}
	code, body := s.call("POST", "/v1/sessions/"+id+"/restart", nil, nil)
	var rr api.RestartResult
	if code != 200 || json.Unmarshal(body, &rr) != nil || !rr.Restarted || rr.State != "fresh" || rr.Restarts != 1 || rr.Python == "" || rr.SessionID != id || !rr.Session.Alive {
		t.Fatalf("restart: %d %s", code, body)
	}
	r = s.cell(id, "import os\nimport signal\nprocs = sorted(open('/proc/%s/comm' % p).read().strip() for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid())\n"+
		"[globals().get('x'), open('/work/a.txt').read(), open('/tmp/t.txt').read(), os.environ.get('SHARED'), os.environ.get('CELL_SET'), 'sleep' in procs, len(procs), signal.getsignal(signal.SIGTERM) == signal.SIG_DFL]")
	if r.Verdict != api.ExecOK || !resultIs(r, "[None, 'kept', 'tmp', 'session', None, False, 1, True]") || r.ExecutionCount != 4 {
		t.Errorf("after the restart: %s %+v", resultText(r), r)
	}
	if r := s.cell(id, "import os\n"+fds); r.Result == nil || *r.Result != *before.Result {
		t.Errorf("the descriptors after the restart: %s, before the cells: %s", resultText(r), resultText(before))
	}
	if _, in := s.info(id); in.Restarts != 1 || !in.Alive {
		t.Errorf("info: %+v", in)
	}
	if !strings.Contains(s.logString(), `"event":"session_restart","run_id":"`+id+`"`) {
		t.Errorf("no audit line of the restart:\n%s", s.logString())
	}
	// The fresh interpreter answers KeyboardInterrupt: a timeout keeps
	// its state (a SIGINT the restart left blocked would cost the session).
	s.cell(id, "y = 'fresh'")
	if r := s.exec(id, api.ExecRequest{Code: ptr("while True: pass"), Timeout: "1s"}); r.Verdict != api.ExecTimeout || r.State != "kept" {
		t.Errorf("a timeout after the restart: %+v", r)
	}
	if r := s.cell(id, "y"); !resultIs(r, "'fresh'") {
		t.Errorf("state after the timeout: %+v", r)
	}
	// Twice in a row, and the session still runs cells.
	if code, body := s.call("POST", "/v1/sessions/"+id+"/restart", nil, nil); code != 200 || !bytes.Contains(body, []byte(`"restarts":2`)) {
		t.Errorf("second restart: %d %s", code, body)
	}
	if r := s.cell(id, "6 * 7"); !resultIs(r, "42") {
		t.Errorf("after the second restart: %+v", r)
	}
}

// A process a cell leaves behind holds the driver's channel (a fork keeps
// it): a restart must not leave it to write on the fresh driver's channel
// and end the session, nor to run on beside the fresh interpreter.
func TestAttackSessionRestartLeavesProcesses(t *testing.T) {
	s := startServer(t, "--pool", "1")
	id := s.session(api.SessionRequest{}).SessionID
	r := s.cell(id, "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(6)\n    os.write(3, b'5\\n{\"x\"}')\n    os._exit(0)\n'forked'")
	if !resultIs(r, "'forked'") {
		t.Fatalf("fork: %+v", r)
	}
	if code, body := s.call("POST", "/v1/sessions/"+id+"/restart", nil, nil); code != 200 || !bytes.Contains(body, []byte(`"restarted":true`)) {
		t.Fatalf("restart: %d %s", code, body)
	}
	time.Sleep(7 * time.Second)
	r = s.cell(id, "import os\nlen([p for p in os.listdir('/proc') if p.isdigit()])")
	if r.Verdict != api.ExecOK || !resultIs(r, "2") || !r.Session.Alive {
		t.Errorf("after the restart, the child's time gone by: %s %+v", resultText(r), r)
	}
}

// A restart waits for the exec running, as an exec does, then 409.
func TestSessionRestartWhileBusy(t *testing.T) {
	s := startServer(t, "--pool", "1", "--queue-wait", "1s")
	id := s.session(api.SessionRequest{}).SessionID
	done := make(chan *api.ExecResult, 1)
	go func() { done <- s.exec(id, api.ExecRequest{Code: ptr("import time\ntime.sleep(30)"), Timeout: "20s"}) }()
	eventually(t, "the exec runs", func() bool { _, in := s.info(id); return in.Busy })
	if code, body := s.call("POST", "/v1/sessions/"+id+"/restart", nil, nil); code != 409 || !bytes.Contains(body, []byte("interrupt")) {
		t.Errorf("restart while busy: %d %s", code, body)
	}
	s.call("POST", "/v1/sessions/"+id+"/interrupt", nil, nil)
	if r := <-done; r.Verdict != api.ExecInterrupted {
		t.Errorf("the exec: %+v", r)
	}
	if code, body := s.call("POST", "/v1/sessions/"+id+"/restart", nil, nil); code != 200 {
		t.Errorf("restart once idle: %d %s", code, body)
	}
}

// serve's --session-FLAGs: each exec's limits for sessions alone, laid
// over the profile; /v1/run keeps the profile's, and sessions still come
// from the pool.
func TestServeSessionFlags(t *testing.T) {
	s := startServer(t, "--pool", "1", "--session-timeout", "20s", "--session-cpu-time", "2s", "--session-output-limit", "64K")
	c := s.session(api.SessionRequest{})
	if !c.Pool.Hit || c.Limits.TimeoutMs != 20000 || c.Limits.CPUTimeMs != 2000 || c.Limits.OutputBytes != 64<<10 || c.Limits.MemoryBytes != 512<<20 {
		t.Errorf("a session: %+v", c)
	}
	if code, body := s.call("POST", "/v1/sessions", api.SessionRequest{Limits: api.Limits{"timeout": "21s"}}, nil); code != 422 {
		t.Errorf("a session asking past --session-timeout: %d %s", code, body)
	}
	r := s.exec(c.SessionID, api.ExecRequest{Code: ptr("print('x' * 100000)")})
	if r.Verdict != api.ExecOutput || r.StdoutBytes != 100001 || len(r.Stdout) != 64<<10 {
		t.Errorf("output past --session-output-limit: verdict %s, %d bytes of %d kept", r.Verdict, len(r.Stdout), r.StdoutBytes)
	}
	s.waitReady()
	run := s.run(api.RunRequest{Code: code("1")})
	if run.Limits.TimeoutMs != 10000 || run.Limits.OutputBytes != 1<<20 {
		t.Errorf("/v1/run's limits: %+v", run.Limits)
	}
	// Without the flags, a session's exec may run SessionDefaults' 5m.
	d := startServer(t, "--pool", "0")
	if c := d.session(api.SessionRequest{}); c.Limits.TimeoutMs != 300000 {
		t.Errorf("the default session timeout: %+v", c.Limits)
	}
}

func resultText(r *api.ExecResult) string {
	if r.Result == nil {
		return "<no result>"
	}
	return *r.Result
}
