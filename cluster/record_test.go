package cluster

import (
	"encoding/json"
	"strings"
	"testing"
)

// A node stores its server's answer: the status and the kept headers
// only; an answer past max_result is a 502 that says so, not a cut body.
func TestRecorderAnswer(t *testing.T) {
	rec := newRecorder(16)
	rec.Header().Set("Content-Type", "application/json")
	rec.Header().Set("Retry-After", "1")
	rec.Header().Set("X-Internal", "not kept")
	rec.WriteHeader(429)
	rec.Write([]byte(`{"error":"x"}`))
	a := rec.answer()
	if a.Status != 429 || string(a.Body) != `{"error":"x"}` || len(a.Header) != 2 || a.Header["Retry-After"] != "1" {
		t.Fatalf("answer %d %v %q", a.Status, a.Header, a.Body)
	}

	rec = newRecorder(16)
	rec.Header().Set("Location", "/v1/runs/x")
	rec.Write([]byte(`{"stdout":"`))
	rec.Write([]byte(strings.Repeat("a", 16) + `"}`))
	a = rec.answer()
	var body map[string]string
	if a.Status != 502 || a.Header["Location"] != "" || json.Unmarshal(a.Body, &body) != nil || !strings.Contains(body["error"], "max_result") {
		t.Fatalf("an answer over max_result: %d %v %q", a.Status, a.Header, a.Body)
	}
}
