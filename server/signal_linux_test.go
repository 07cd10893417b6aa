package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
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
	for i, accept := range []string{"", NDJSON, ""} {
		answers[i] = make(chan answer, 1)
		go func() {
			b, _ := json.Marshal(RunRequest{Argv: []string{"sh", "-c", "sleep 1000; : " + mark}})
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
		var h Health
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
				var r RunResponse
				if err := json.Unmarshal([]byte(a.body), &r); err != nil || r.Error == nil || r.ExitCode != 130 {
					t.Errorf("the cancelled run's answer: %+v %v", r, err)
				}
			}
		case <-time.After(10 * time.Second):
			t.Errorf("request %d: no answer 10s after the server stopped", i)
		}
	}
}
