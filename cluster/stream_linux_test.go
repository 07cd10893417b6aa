package cluster

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
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/client"
	"github.com/stockade/stockade/internal/proctest"
)

// streamCode prints a line to each stream, then waits: the line must
// reach the caller while the run still runs.
// Each is one write: the lines' chunks are the same wherever it runs.
const streamCode = `import os, time
os.write(1, b'first\n')
os.write(2, b'to stderr\n')
time.sleep(%s)
os.write(1, b'second\n')`

// streamPost is POST /v1/run asking for NDJSON through the bench
// gateway; the answer's body is the caller's to read and close.
func (g *benchGateway) streamPost(ctx context.Context, body map[string]any) *http.Response {
	g.b.Helper()
	bb, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, "POST", g.url+"/v1/run", bytes.NewReader(bb))
	req.Header.Set("Authorization", "Bearer "+g.token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", api.NDJSON)
	resp, err := g.client.Do(req)
	if err != nil {
		g.b.Fatalf("a streamed run through the gateway: %v", err)
	}
	return resp
}

// streamLines reads an NDJSON answer's lines; each is checked to be one
// JSON line of the stream's shape, and nothing follows the result line.
// first, when not nil, is called at the first stdout line.
func streamLines(t *testing.T, r io.Reader, first func()) []string {
	t.Helper()
	br := bufio.NewReader(r)
	var lines []string
	for {
		line, err := br.ReadString('\n')
		if err == io.EOF && line == "" {
			break
		}
		if err != nil {
			t.Fatalf("reading the stream after %d lines: %v (partial %q)", len(lines), err, line)
		}
		var l struct {
			Type string `json:"type"`
			Data string `json:"data"`
		}
		if json.Unmarshal([]byte(line), &l) != nil || l.Type == "" {
			t.Fatalf("a stream line that is not one: %q", line)
		}
		if len(lines) > 0 && strings.Contains(lines[len(lines)-1], `"type":"result"`) {
			t.Fatalf("a line after the result line: %q", line)
		}
		lines = append(lines, line)
		if first != nil && l.Type == api.StreamStdout {
			first()
			first = nil
		}
	}
	if len(lines) == 0 || !strings.HasPrefix(lines[len(lines)-1], `{"type":"result"`) {
		t.Fatalf("the stream did not end with one result line: %q", lines)
	}
	return lines
}

// A streamed run through a real gateway and a real node: the lines come
// while the run runs (a GET at the first says it is running), each output
// line is byte for byte what the node's own unix socket streams for the
// same code, the result line is the socket's with run_id and node added,
// and once; the Go client's RunStream and `stockade run --server` stream
// through it too.
func TestClusterStreamedRun(t *testing.T) {
	f := newFixture(t, 1)
	h := f.hosts[0]
	f.startNode(h)
	gw := startBenchGateway(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), proctest.Budget(t, 3*time.Minute))
	defer cancel()

	code := strings.Replace(streamCode, "%s", "6", 1)
	resp := gw.streamPost(ctx, map[string]any{"code": code})
	defer resp.Body.Close()
	id := resp.Header.Get(RunIDHeader)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != api.NDJSON || id == "" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("a streamed run: %d %q run id %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), id, b)
	}
	var whileRunning int
	var runningBody map[string]any
	lines := streamLines(t, resp.Body, func() {
		req, _ := http.NewRequestWithContext(ctx, "GET", gw.url+"/v1/runs/"+id, nil)
		req.Header.Set("Authorization", "Bearer "+gw.token)
		whileRunning, runningBody = doJSON(gw.client, req)
	})
	if whileRunning != 202 || runningBody["state"] != "running" {
		t.Errorf("GET /v1/runs/{id} at the first line: %d %v; want 202 running (the line came only at the end?)", whileRunning, runningBody)
	}

	// The same code on the node's unix socket, streamed.
	uc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", filepath.Join(h.dir, "s.sock"))
	}}}
	defer uc.CloseIdleConnections()
	bb, _ := json.Marshal(map[string]any{"code": code})
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://stockade/v1/run", bytes.NewReader(bb))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", api.NDJSON)
	uresp, err := uc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer uresp.Body.Close()
	ulines := streamLines(t, uresp.Body, nil)
	// Each output stream's lines, byte for byte (stdout's and stderr's
	// are drained apart: their interleaving is the moment's).
	for _, typ := range []string{api.StreamStdout, api.StreamStderr} {
		a, b := linesOf(lines, typ), linesOf(ulines, typ)
		if strings.Join(a, "") != strings.Join(b, "") || len(a) == 0 {
			t.Errorf("%s lines through the gateway %q, on the socket %q", typ, a, b)
		}
	}
	last, ulast := lines[len(lines)-1], ulines[len(ulines)-1]
	suffix := `,"run_id":"` + id + `","node":"` + h.name + `"}` + "\n"
	if !strings.HasSuffix(last, suffix) {
		t.Fatalf("the result line %q does not end with %q", last, suffix)
	}
	var got, want map[string]any
	json.Unmarshal([]byte(strings.TrimSuffix(last, suffix)+"}"), &got)
	json.Unmarshal([]byte(ulast), &want)
	if got == nil || got["verdict"] != "ok" || got["stdout"] != "first\nsecond\n" || len(got) != len(want) {
		t.Errorf("the result line through the gateway %q; on the socket %q", last, ulast)
	}
	for k := range want {
		if _, ok := got[k]; !ok {
			t.Errorf("the result line through the gateway lacks %q", k)
		}
	}
	// Asked again, the run's stored answer (no "type").
	req, _ = http.NewRequestWithContext(ctx, "GET", gw.url+"/v1/runs/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+gw.token)
	if st, m := doJSON(gw.client, req); st != 200 || m["verdict"] != "ok" || m["stdout"] != "first\nsecond\n" || m["type"] != nil || m["run_id"] != id {
		t.Errorf("GET /v1/runs/{id} after the stream: %d %v", st, m)
	}

	// A refusal before the stream began is answered whole, with its
	// status, as the socket answers it.
	bad := gw.streamPost(ctx, map[string]any{"code": "pass", "argv": []string{"true"}})
	bb, _ = io.ReadAll(bad.Body)
	bad.Body.Close()
	var refusal map[string]any
	if bad.StatusCode/100 != 4 || bad.Header.Get("Content-Type") != "application/json" || json.Unmarshal(bb, &refusal) != nil || refusal["error"] == nil {
		t.Errorf("a refused streamed run: %d %q %s", bad.StatusCode, bad.Header.Get("Content-Type"), bb)
	}

	// The Go client's RunStream.
	cl, err := client.New(gw.url, client.Options{Token: gw.token, CAFile: filepath.Join(f.dir, "gw.pem")})
	if err != nil {
		t.Fatal(err)
	}
	var out, errw proctest.Buffer
	res, err := cl.RunStream(ctx, &api.RunRequest{Code: ptr(strings.Replace(streamCode, "%s", "0", 1))}, client.Output{Stdout: &out, Stderr: &errw})
	if err != nil || res.Verdict != "ok" || out.String() != "first\nsecond\n" || errw.String() != "to stderr\n" {
		t.Errorf("RunStream through the gateway: %v %+v; stdout %q stderr %q", err, res, out.String(), errw.String())
	}

	// stockade run --server https://..., which streams.
	cmd := exec.Command(f.bin, "run", "--server", gw.url, "--ca-file", filepath.Join(f.dir, "gw.pem"), "--",
		"python3", "-c", "import sys; print('cli out', flush=True); print('cli err', file=sys.stderr); sys.exit(4)")
	cmd.Env = append(os.Environ(), "STOCKADE_TOKEN="+gw.token)
	o := proctest.Run(t, cmd, proctest.Budget(t, 90*time.Second))
	if o.Code() != 4 || o.Stdout != "cli out\n" || !strings.Contains(o.Stderr, "cli err") {
		t.Errorf("stockade run --server through the gateway: exit %d, stdout %q, stderr %q", o.Code(), o.Stdout, o.Stderr)
	}
}

// A host killed in the middle of a streamed run: the stream ends with one
// result line, host_lost naming the host, as the unstreamed answer says
// (its time after the kill is logged: make check asserts no wall clock).
func TestClusterStreamHostKilledAnswersHostLost(t *testing.T) {
	f := newFixture(t, 2)
	for _, h := range f.hosts {
		f.startNode(h)
	}
	gw := startBenchGateway(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), proctest.Budget(t, 3*time.Minute))
	defer cancel()
	resp := gw.streamPost(ctx, map[string]any{"code": strings.Replace(streamCode, "%s", "120", 1)})
	defer resp.Body.Close()
	id := resp.Header.Get(RunIDHeader)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != api.NDJSON {
		t.Fatalf("a streamed run: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var victim string
	var killedAt time.Time
	lines := streamLines(t, resp.Body, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		e, err := f.g.b.claims.Get(ctx, id)
		var c claim
		if err != nil || json.Unmarshal(e.Value(), &c) != nil {
			t.Fatalf("the claim of a run that streams: %v", err)
		}
		victim = c.Node
		f.kill9(f.hostNamed(victim))
		killedAt = time.Now()
	})
	answered := time.Since(killedAt)
	var last map[string]any
	json.Unmarshal([]byte(lines[len(lines)-1]), &last)
	if last["verdict"] != "host_lost" || last["node"] != victim || last["run_id"] != id || last["type"] != "result" {
		t.Fatalf("the last line after the host's kill: %q", lines[len(lines)-1])
	}
	if !slices.Contains(lines, `{"type":"stdout","data":"first\n"}`+"\n") {
		t.Errorf("the lines before the kill: %q", lines)
	}
	t.Logf("host_lost %v after the kill (grace %v)", answered.Round(time.Millisecond), testGrace)
	// Asked again, the same.
	if st, _, m := f.do(ctx, "bench", "", "GET", "/v1/runs/"+id, nil); st != 200 || m["verdict"] != "host_lost" {
		t.Errorf("GET of the lost run: %d %v", st, m)
	}
}

// pipeWriter is a ResponseWriter whose body goes into a pipe, so that a
// test reads a streamed answer as it is written.
type pipeWriter struct {
	h  http.Header
	mu sync.Mutex
	st int
	w  *io.PipeWriter
}

func (p *pipeWriter) Header() http.Header { return p.h }
func (p *pipeWriter) WriteHeader(code int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.st == 0 {
		p.st = code
	}
}
func (p *pipeWriter) Write(b []byte) (int, error) { return p.w.Write(b) }

// A gateway gone in the middle of a streamed run (its NATS connection
// closed, its caller cut off): the run finishes on its node, and its
// result is fetchable at GET /v1/runs/{id} from another gateway.
func TestClusterStreamGatewayGoneRunFinishes(t *testing.T) {
	f := newFixture(t, 1)
	f.startNode(f.hosts[0])
	ctx, cancel := context.WithTimeout(context.Background(), proctest.Budget(t, 3*time.Minute))
	defer cancel()
	g2, err := NewBackend(ctx, f.gcfg)
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	w := &pipeWriter{h: http.Header{}, w: pw}
	rctx, rcancel := context.WithCancel(ctx)
	r, _ := http.NewRequestWithContext(rctx, "POST", "/v1/run", strings.NewReader(`{"code":`+string(mustJSON(strings.Replace(streamCode, "%s", "3", 1)))+`}`))
	r.Header.Set("Accept", api.NDJSON)
	served := make(chan struct{})
	go func() {
		defer close(served)
		defer pw.Close()
		g2.Serve(w, r, "tenant-a", "gone-mid-stream")
	}()
	br := bufio.NewReader(pr)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("the stream ended before its first output line: %v", err)
		}
		if strings.Contains(line, `"type":"stdout"`) {
			break
		}
	}
	id := w.Header().Get(RunIDHeader)
	// The gateway goes: its caller is cut off, its connection closed.
	rcancel()
	go io.Copy(io.Discard, pr)
	g2.Close()
	<-served
	for {
		st, _, m := f.do(ctx, "tenant-a", "", "GET", "/v1/runs/"+id, nil)
		if st == 200 {
			if m["verdict"] != "ok" || m["stdout"] != "first\nsecond\n" || m["type"] != nil {
				t.Errorf("the run's result after its gateway went: %v", m)
			}
			break
		}
		if st != 202 || ctx.Err() != nil {
			t.Fatalf("GET /v1/runs/{id}: %d %v", st, m)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if starts := f.auditStarts()[id]; len(starts) != 1 {
		t.Errorf("the run started on %v", starts)
	}
}

func ptr[T any](v T) *T { return &v }

func linesOf(lines []string, typ string) []string {
	var out []string
	for _, l := range lines {
		if strings.HasPrefix(l, `{"type":"`+typ+`"`) {
			out = append(out, l)
		}
	}
	return out
}
