package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/internal/proctest"
)

// vmNetUpstream is the host's side of a vm session's network test: an
// origin on the host's loopback, reached as allowed.test (203.0.113.7)
// through a stand-in for the server's own upstream proxy (its
// HTTPS_PROXY), which records every CONNECT it is asked for and answers
// any target but the origin's with 502. loop.test resolves to 127.0.0.1,
// which the rules list and the address classes refuse; other.test is
// not in the rules.
type vmNetUpstream struct {
	*proctest.Upstream
	hosts string
	// release ends the wait of a request for /wait, which answers
	// "released" then, or "late" after 40 s.
	release chan struct{}
}

const vmNetOrigin = "203.0.113.7:80"

func newVMNetUpstream(t *testing.T) *vmNetUpstream {
	t.Helper()
	u := &vmNetUpstream{hosts: filepath.Join(t.TempDir(), "hosts"), release: make(chan struct{})}
	if err := os.WriteFile(u.hosts, []byte("203.0.113.7 allowed.test\n203.0.113.8 other.test\n127.0.0.1 loop.test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	head := func(br *bufio.Reader) (string, bool) {
		first, err := br.ReadString('\n')
		for err == nil {
			var l string
			if l, err = br.ReadString('\n'); l == "\r\n" {
				return strings.TrimSpace(first), true
			}
		}
		return "", false
	}
	origin := proctest.Listen(t, func(c net.Conn) {
		req, ok := head(bufio.NewReader(c))
		if !ok {
			return
		}
		body := "hello\n"
		if strings.HasPrefix(req, "GET /wait ") {
			select {
			case <-u.release:
				body = "released\n"
			case <-time.After(40 * time.Second):
				body = "late\n"
			}
		}
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	})
	u.Upstream = proctest.NewUpstream(t, vmNetOrigin, origin)
	return u
}

// netOf lists an exec's network entries, each as host:port via
// allowed/refused count (address).
func netOf(ds []api.NetworkDecision) []string {
	var out []string
	for _, d := range ds {
		out = append(out, fmt.Sprintf("%s:%d %s %v %d %s", d.Host, d.Port, d.Via, d.Allowed, d.Count, d.Address))
	}
	return out
}

// TestVMSessionNetThroughServe: a session of a vm profile with an
// allowlist, through stockade serve, reaches an allowed host on the
// host's loopback over its guest's network channel and the host's proxy
// (the server's own upstream); a name the rules do not list is refused
// by the guest's proxy, one they list that resolves to loopback by the
// host's. Two execs keep the session's state between them, each with
// its own share of the network entries (the host's decisions merged
// with the guest's); DELETE's accounting has them all, and leaves
// nothing of the guest on the host (its VMM, its cgroup, its run
// directory with the network channel's socket).
func TestVMSessionNetThroughServe(t *testing.T) {
	env := vmServeEnv(t)
	bin := needServer(t)
	up := newVMNetUpstream(t)
	profile := filepath.Join(t.TempDir(), "vmnet.toml")
	err := os.WriteFile(profile, []byte(`extends = "python"
isolation = "vm"
[network]
allow = ["allowed.test:80", "loop.test:80"]
allow_private = ["203.0.113.0/24"]
`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(socketDir(t), "s.sock")
	cmd := exec.Command(bin, "serve", "--socket", sock, "--profile", profile, "--vm-pool", "0")
	cmd.Env = append(append(os.Environ(), env...), "HTTPS_PROXY="+up.URL, "STOCKADE_NET_HOSTS="+up.hosts)
	s := startServerReadyWithin(t, sock, cmd, 2*time.Minute)

	created := s.session(api.SessionRequest{Profile: profile})
	guest := onlyGuest(t, s)
	if _, err := os.Stat(filepath.Join(guest.dir, "net")); err != nil {
		t.Errorf("the guest has no network channel: %v", err)
	}
	r := s.cell(created.SessionID, `
import urllib.request, urllib.error
def get(name):
    try:
        return urllib.request.urlopen("http://" + name + "/hello", timeout=120).read().decode().strip()
    except urllib.error.HTTPError as e:
        return "refused %d" % e.code
first = get("allowed.test")
print("allowed.test ->", first)
print("other.test ->", get("other.test"))
`)
	if want := "allowed.test -> hello\nother.test -> refused 403\n"; r.Verdict != api.ExecOK || r.Stdout != want {
		t.Fatalf("first exec: %s stdout %q, want %q; stderr %s\n%s", r.Verdict, r.Stdout, want, r.Stderr, s.logString())
	}
	if strings.Contains(r.Stderr, "allowed.test") {
		t.Errorf("first exec's stderr %q: a notice of the allowed host", r.Stderr)
	}
	want := []string{"allowed.test:80 GET true 1 " + vmNetOrigin, "other.test:80 GET false 1 "}
	if got := netOf(r.Network); !slices.Equal(got, want) {
		t.Errorf("first exec's network %q, want %q (the host's dial, the guest's refusal)", got, want)
	}
	r = s.cell(created.SessionID, `
print("state:", first)
print("loop.test ->", get("loop.test"))
print("allowed.test ->", get("allowed.test"))
`)
	if want := "state: hello\nloop.test -> refused 403\nallowed.test -> hello\n"; r.Verdict != api.ExecOK || r.Stdout != want {
		t.Fatalf("second exec: %s stdout %q, want %q; stderr %s", r.Verdict, r.Stdout, want, r.Stderr)
	}
	var loop bool
	for _, d := range r.Network {
		loop = loop || d.Host == "loop.test" && !d.Allowed && strings.Contains(d.Reason, "127.0.0.1")
	}
	if got := netOf(r.Network); !loop || !slices.Contains(got, "allowed.test:80 GET true 1 "+vmNetOrigin) || len(got) != 2 {
		t.Errorf("second exec's network %q: want this exec's two, loop.test refused by the host for its address", got)
	}
	if !strings.Contains(r.Stderr, "stockade: network: refused") || !strings.Contains(r.Stderr, "loop.test") {
		t.Errorf("second exec's stderr %q: want the host's refusal's notice", r.Stderr)
	}
	if asked := up.Asked(); !slices.Equal(asked, []string{vmNetOrigin, vmNetOrigin}) {
		t.Errorf("the server's upstream was asked for %q, want %s twice", asked, vmNetOrigin)
	}
	streamed(t, s, created.SessionID, up.release)
	code, body := s.call("DELETE", "/v1/sessions/"+created.SessionID, nil, nil)
	var end api.SessionEnd
	if code != 200 || json.Unmarshal(body, &end) != nil || end.Verdict != api.SessionClosed {
		t.Fatalf("DELETE: %d %s", code, body)
	}
	n := 0
	for _, d := range end.Network {
		if d.Host == "allowed.test" && d.Allowed && d.Address == vmNetOrigin {
			n += d.Count
		}
	}
	if n != 3 {
		t.Errorf("DELETE's network %q: want allowed.test dialled three times by the host", netOf(end.Network))
	}
	guest.gone(t)
}

// streamed runs an exec of the session with Accept: NDJSON whose cell
// prints "up" and then fetches http://allowed.test/wait, which answers
// once release is closed (else "late", 40 s on): the test closes it only
// when it has read the "up" line, so the cell's output comes as the
// cell writes it, before its result, or the exec prints "late".
func streamed(t *testing.T, s *testServer, id string, release chan struct{}) {
	t.Helper()
	b, _ := json.Marshal(api.ExecRequest{Code: ptr(`
print("up", flush=True)
print("wait ->", urllib.request.urlopen("http://allowed.test/wait", timeout=120).read().decode().strip())
`)})
	req, _ := http.NewRequest("POST", "http://stockade/v1/sessions/"+id+"/exec", bytes.NewReader(b))
	req.Header.Set("Accept", api.NDJSON)
	resp, err := s.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != api.NDJSON {
		t.Fatalf("streamed exec: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(nil, 1<<20)
	var got []string
	var res api.ExecResult
	for lines.Scan() {
		var l api.StreamLine
		if err := json.Unmarshal(lines.Bytes(), &l); err != nil {
			t.Fatalf("line %q: %v", lines.Bytes(), err)
		}
		if l.Type == api.StreamResult {
			if err := json.Unmarshal(lines.Bytes(), &res); err != nil {
				t.Fatalf("the result line %q: %v", lines.Bytes(), err)
			}
			break
		}
		got = append(got, l.Type+" "+l.Data)
		if l.Type == api.StreamStdout && strings.HasPrefix(l.Data, "up") && len(got) == 1 {
			close(release)
		}
	}
	// Chunks are as the cell wrote them (a line and its newline may
	// come apart): what they carry, in order, is the cell's stdout.
	all := ""
	for _, g := range got {
		all += strings.TrimPrefix(g, "stdout ")
	}
	if want := "up\nwait -> released\n"; len(got) < 2 || all != want || res.Verdict != api.ExecOK || res.Stdout != want || res.Session.ID != id {
		t.Errorf("streamed exec: lines %q, want stdout %q as written; result %s %q (session %q)", got, want, res.Verdict, res.Stdout, res.Session.ID)
	}
}
