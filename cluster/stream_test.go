package cluster

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/stockade/stockade/api"
)

// testStream is a gateway's runStream for run "r1" claimed by h1, its
// caller's answer recorded.
func testStream(maxResult int64) (*runStream, *httptest.ResponseRecorder) {
	w := httptest.NewRecorder()
	g := &Backend{cfg: Config{MaxResult: maxResult}}
	return &runStream{g: g, w: w, rc: http.NewResponseController(w), tenant: "t", id: "r1", stream: true, node: "h1", next: 1}, w
}

func runMsg(node string, seq int, data string) *nats.Msg {
	m := nats.NewMsg(RunSubject(node, "r1"))
	m.Header.Set(SeqHeader, strconv.Itoa(seq))
	m.Data = []byte(data)
	return m
}

const (
	outLine    = `{"type":"stdout","data":"hi\n"}` + "\n"
	resultJSON = `{"type":"result","verdict":"ok","stdout":"hi\n"}` + "\n"
)

// A well-formed stream is forwarded as it came, its result line once
// with run_id and node added; nothing after it.
func TestRunStreamForwardsInOrder(t *testing.T) {
	s, w := testStream(1 << 20)
	for i, c := range []struct {
		data string
		want taken
	}{{"", takeMore}, {outLine, takeMore}, {resultJSON, takeFinal}} {
		if got := s.take(runMsg("h1", i+1, c.data)); got != c.want {
			t.Fatalf("message %d: %v, want %v", i+1, got, c.want)
		}
	}
	want := outLine + `{"type":"result","verdict":"ok","stdout":"hi\n","run_id":"r1","node":"h1"}` + "\n"
	if w.Body.String() != want || w.Header().Get("Content-Type") != api.NDJSON || w.Code != 200 {
		t.Errorf("forwarded %d %q %q, want %q", w.Code, w.Header().Get("Content-Type"), w.Body.String(), want)
	}
	// A second result line is not forwarded: the stream is over.
	s.take(runMsg("h1", 4, resultJSON))
	if w.Body.String() != want {
		t.Errorf("after the result line: %q", w.Body.String())
	}
}

// What a node may not do to a stream: each breaks it (nothing more is
// forwarded; the stored result ends it), or is dropped.
func TestAttackNodeStreamLines(t *testing.T) {
	long := `{"type":"stdout","data":"` + strings.Repeat("x", 8192) + `"}` + "\n"
	for _, c := range []struct {
		name      string
		msgs      []*nats.Msg
		forwarded string
	}{
		{"a gap in the sequence", []*nats.Msg{runMsg("h1", 3, outLine)}, ""},
		{"a line repeated", []*nats.Msg{runMsg("h1", 2, outLine), runMsg("h1", 2, outLine)}, outLine},
		{"two lines in one", []*nats.Msg{runMsg("h1", 2, outLine+outLine)}, ""},
		{"a line without its newline", []*nats.Msg{runMsg("h1", 2, strings.TrimSuffix(outLine, "\n"))}, ""},
		{"a line over the bound", []*nats.Msg{runMsg("h1", 2, long)}, ""},
		{"a line of an unknown type", []*nats.Msg{runMsg("h1", 2, `{"type":"exit","data":""}`+"\n")}, ""},
		{"an output line with more fields", []*nats.Msg{runMsg("h1", 2, `{"type":"stdout","data":"x","verdict":"ok"}`+"\n")}, ""},
		{"a line that is not JSON", []*nats.Msg{runMsg("h1", 2, "{\"type\":\"stdout\",\n")}, ""},
		{"a second beginning", []*nats.Msg{runMsg("h1", 2, "")}, ""},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			s, w := testStream(4096)
			s.take(runMsg("h1", 1, "")) // the beginning
			for _, m := range c.msgs {
				s.take(m)
			}
			before := w.Body.String()
			// A good line after it is not forwarded either: the stream
			// is broken (its end comes from the stored result).
			next := s.next
			if got := s.take(runMsg("h1", next, resultJSON)); got == takeFinal || w.Body.String() != before {
				t.Errorf("%s: then the result line was %v; forwarded %q", c.name, got, w.Body.String())
			}
			if before != c.forwarded {
				t.Errorf("%s: forwarded %q, want %q", c.name, before, c.forwarded)
			}
		})
	}
}

// A line on another node's subject of the run is dropped: only the
// claimer's are forwarded (NATS lets a node publish under its own name
// only).
func TestAttackNodeStreamLinesOfAnotherNode(t *testing.T) {
	s, w := testStream(4096)
	s.take(runMsg("h1", 1, ""))
	forged := `{"type":"stdout","data":"forged"}` + "\n"
	if got := s.take(runMsg("h2", 2, forged)); got != takeMore {
		t.Errorf("a line of another node: %v", got)
	}
	if got := s.take(runMsg("h2", 2, resultJSON)); got != takeMore {
		t.Errorf("a result line of another node: %v", got)
	}
	if got := s.take(runMsg("h1", 2, outLine)); got != takeMore || w.Body.String() != outLine {
		t.Errorf("after another node's lines, the claimer's: %v, forwarded %q", got, w.Body.String())
	}
}

// The count of lines is bounded.
func TestRunStreamLineCountBound(t *testing.T) {
	s, w := testStream(1 << 30)
	s.take(runMsg("h1", 1, ""))
	for i := range maxStreamLines + 1 {
		s.take(runMsg("h1", i+2, outLine))
	}
	if n := strings.Count(w.Body.String(), "\n"); n != maxStreamLines || !s.broken {
		t.Errorf("%d lines forwarded (broken %v), want %d", n, s.broken, maxStreamLines)
	}
}

// A stream's last line made by the gateway (host_lost, or from the stored
// result) has the server's shape: "type" first, one line.
func TestResultLineShape(t *testing.T) {
	got := string(resultLine(lostBody("r1", "h1", "gone")))
	if !strings.HasPrefix(got, `{"type":"result","error":`) || strings.Count(got, "\n") != 1 || !strings.HasSuffix(got, "}\n") {
		t.Errorf("resultLine: %q", got)
	}
	var m map[string]any
	if json.Unmarshal([]byte(got), &m) != nil || m["verdict"] != "host_lost" || m["run_id"] != "r1" {
		t.Errorf("resultLine: %q", got)
	}
	if got := string(resultLine([]byte(`{}`))); got != `{"type":"result"}`+"\n" {
		t.Errorf("resultLine of {}: %q", got)
	}
}
