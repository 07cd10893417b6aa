package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/api"
)

// A local user who can write in the socket's directory could swap the
// socket for a symlink between bind and chmod (the server then chmods
// whatever it points at), or replace it with their own listener and read
// every caller's code. The server refuses such a directory, and one owned
// by another user, before it makes anything there.
func TestAttackSocketDirOthersCanWrite(t *testing.T) {
	bin := needServer(t)
	for _, tc := range []struct {
		name  string
		mode  os.FileMode
		owner int
		want  string
	}{
		{"world-writable", 0o777, 0, "writable by group or others"},
		{"group-writable", 0o775, 0, "writable by group or others"},
		{"sticky /tmp-like", 0o1777, 0, "writable by group or others"},
		{"another user's", 0o755, 65534, "owned by uid 65534"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := filepath.Join(socketDir(t), "sockdir")
			if err := os.Mkdir(d, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(d, tc.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(d, tc.owner, tc.owner); err != nil {
				t.Fatal(err)
			}
			sock := filepath.Join(d, "s.sock")
			// A server that accepts the directory would serve on: end it.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, bin, "serve", "--pool", "0", "--socket", sock).CombinedOutput()
			if err == nil || !strings.Contains(string(out), tc.want) {
				t.Errorf("serve in a %s directory: %v, %s (want refused: %q)", tc.name, err, out, tc.want)
			}
			if ents, _ := os.ReadDir(d); err == nil && len(ents) != 0 || ctx.Err() != nil {
				t.Errorf("the server left %v in a directory it refused", ents)
			}
		})
	}
	// A directory only its owner can write is accepted, and the socket
	// lands under its own name (not the temporary one), mode 0660.
	s := startServer(t, "--pool", "0")
	st, err := os.Lstat(s.sock)
	if err != nil || st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o660 {
		t.Fatalf("socket: %v %v", st, err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(s.sock)); len(ents) != 1 {
		t.Errorf("socket directory holds %v, want only the socket", ents)
	}
}

// The argv is the caller's, up to --max-body: logged whole, one run made
// a line of megabytes in the audit log (a disk and log-pipeline flood from
// any allowed uid). Only its hash and size are logged.
func TestAttackArgvFloodsAuditLog(t *testing.T) {
	audit := filepath.Join(t.TempDir(), "audit.log")
	s := startServer(t, "--pool", "0", "--audit-log", audit)
	argv := []string{"true"}
	for range 1000 {
		argv = append(argv, strings.Repeat("A", 1000))
	}
	code, _, body := s.post(api.RunRequest{Argv: argv})
	if code != 200 {
		t.Fatalf("POST: %d %.300s", code, body)
	}
	b, err := os.ReadFile(audit)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("audit line: %d bytes for a %d-byte argv", len(b), 1000*1001+5)
	var e map[string]any
	if err := json.Unmarshal(bytes.TrimSpace(b), &e); err != nil {
		t.Fatalf("audit log %q: %v", b, err)
	}
	if len(b) > 4096 || bytes.Contains(b, []byte("AAAA")) {
		t.Errorf("the audit line is %d bytes and carries the argv", len(b))
	}
	if h, _ := e["argv_sha256"].(string); len(h) != 64 || e["argv_count"] != float64(1001) || e["argv_bytes"] != float64(1000*1001+5) {
		t.Errorf("audit line without the argv's hash and size: %s", b)
	}
}

// One uid opens connections and sends nothing: each costs the server a
// goroutine and buffers, and no request cap sees them. Past
// --max-conns-per-caller a connection is answered 503 (after answerWait,
// as it sends no request) and closed, and the server still serves once
// they go.
func TestAttackIdleConnectionFlood(t *testing.T) {
	s := startServer(t, "--pool", "0", "--max-conns-per-caller", "8")
	// The readiness check's keep-alive connection would count too.
	s.hc.CloseIdleConnections()
	time.Sleep(300 * time.Millisecond)
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range 40 {
		c, err := net.Dial("unix", s.sock)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	// Read together: a refused one is answered after answerWait (1 s); an
	// accepted one is not answered before the server's 10 s header
	// timeout, which the deadline stays below.
	answered := make(chan bool, len(held))
	for _, c := range held {
		go func() {
			c.SetReadDeadline(time.Now().Add(6 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err == nil {
				resp.Body.Close()
			}
			answered <- err == nil && resp.StatusCode == 503
		}()
	}
	refused := 0
	for range held {
		if <-answered {
			refused++
		}
	}
	t.Logf("%d of 40 idle connections refused (--max-conns-per-caller 8)", refused)
	if refused != 32 {
		t.Errorf("%d of 40 idle connections from one uid refused; want 32 past --max-conns-per-caller 8", refused)
	}
	for _, c := range held {
		c.Close()
	}
	held = nil
	deadline := time.Now().Add(5 * time.Second)
	for {
		var h api.Health
		if code := s.get("/v1/health", &h); code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the server did not serve again once the idle connections closed")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
