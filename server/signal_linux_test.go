package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/api"
)

// SIGTERM, and a run that outlasts --grace: its jail was killed and its
// connection closed with no answer at all, streamed or not. Each caller
// gets one: 200 with verdict cancelled and the reason, the stream its
// result line; a request still queued gets 503.
func TestServeGraceOverAnswersCancelled(t *testing.T) {
	s := startServer(t, "--pool", "1", "--grace", "500ms", "--concurrency", "2")
	mark := fmt.Sprintf("stockade-grace-answer-%d", time.Now().UnixNano())
	type answer struct {
		status int
		body   string
	}
	answers := make([]chan answer, 3)
	for i, accept := range []string{"", api.NDJSON, ""} {
		answers[i] = make(chan answer, 1)
		go func() {
			b, _ := json.Marshal(api.RunRequest{Argv: []string{"sh", "-c", "sleep 1000; : " + mark}})
			req, _ := http.NewRequest("POST", "http://stockade/v1/run", bytes.NewReader(b))
			if accept != "" {
				req.Header.Set("Accept", accept)
			}
			resp, err := s.hc.Do(req)
			if err != nil {
				answers[i] <- answer{0, err.Error()}
				return
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			answers[i] <- answer{resp.StatusCode, string(body)}
		}()
		if i < 2 {
			eventually(t, "the jail started", func() bool { return len(processesWith(mark)) == i+1 })
		}
	}
	eventually(t, "the third request queued", func() bool {
		var h api.Health
		s.get("/v1/health", &h)
		return h.Queued == 1
	})
	s.stop()
	for i, want := range []string{`"verdict":"cancelled"`, `{"type":"result","verdict":"cancelled"`, `"error":"shutting down: `} {
		select {
		case a := <-answers[i]:
			wantStatus := map[bool]int{true: 503, false: 200}[i == 2]
			if a.status != wantStatus || !strings.Contains(a.body, want) || !strings.Contains(a.body, "--grace 500ms ran out") {
				t.Errorf("request %d, when --grace ran out: %d %.400s (want %d with %s and the reason)", i, a.status, a.body, wantStatus, want)
			}
			if i == 0 {
				var r api.RunResponse
				if err := json.Unmarshal([]byte(a.body), &r); err != nil || r.Error == nil || r.ExitCode != 130 {
					t.Errorf("the cancelled run's answer: %+v %v", r, err)
				}
			}
		case <-time.After(10 * time.Second):
			t.Errorf("request %d: no answer 10s after the server stopped", i)
		}
	}
}

// The socket was removed twice: when the server stopped listening (at
// SIGTERM) and again when it exited, after the grace period. A new server
// started on the same path meanwhile (a restart while the old one drains)
// had its fresh socket removed under it and could never be reached.
func TestServeShutdownRemovesSuccessorsSocket(t *testing.T) {
	bin := needServer(t)
	a := startServer(t, "--pool", "0", "--grace", "10s")
	done := make(chan struct{})
	go func() {
		defer close(done)
		b, _ := json.Marshal(api.RunRequest{Code: code("import time; time.sleep(3)")})
		if resp, err := a.hc.Post("http://stockade/v1/run", "application/json", bytes.NewReader(b)); err == nil {
			resp.Body.Close()
		}
	}()
	eventually(t, "the run started", func() bool {
		var h api.Health
		a.get("/v1/health", &h)
		return h.Running == 1
	})
	a.cmd.Process.Signal(syscall.SIGTERM)
	eventually(t, "the old server stopped listening", func() bool {
		_, err := os.Lstat(a.sock)
		return os.IsNotExist(err)
	})
	b := startServerAt(t, bin, a.sock, "--pool", "0")
	select {
	case <-a.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the old server did not exit")
	}
	<-done
	b.hc.CloseIdleConnections() // a new connection, by the path
	if code := b.get("/v1/health", nil); code != 200 {
		t.Errorf("the new server, once the old one exited: GET /v1/health %d, want 200 (its socket removed?)", code)
	}
}
