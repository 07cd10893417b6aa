package cluster

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/proctest"
)

// The server writes a run's answer with <, > and & as they are; the node
// stored it inside its result's JSON with encoding/json's default, which
// writes each as \u003c: six bytes for one. An output of HTML (or of '<'
// alone) well inside max_result made a stored result up to six times
// max_result, over the results bucket's value bound: refused, and the
// caller told result_not_stored for a result that fits. The same held for
// a run's request in its job (max_request) and a streamed run's result
// line. Stored as the server wrote them, they fit.
func TestAttackHTMLOutputOverflowsEnvelope(t *testing.T) {
	const maxResult = 200 << 10
	const maxRequest = 256 << 10
	edit := func(c *Config) { c.MaxResult, c.MaxRequest = maxResult, maxRequest }
	f := newFixtureWith(t, 1, edit)
	f.nodeEdit = edit
	f.startNode(f.hosts[0])
	ctx, cancel := context.WithTimeout(context.Background(), proctest.Budget(t, 2*time.Minute))
	defer cancel()
	const n = 100_000 // half of max_result; six times it is three max_results
	st, _, m := f.do(ctx, "tenant-a", "", "POST", "/v1/run", map[string]any{"code": "print('<' * 100000)"})
	if out, _ := m["stdout"].(string); st != 200 || m["verdict"] != "ok" || len(out) != n+1 || strings.Trim(out, "<\n") != "" {
		t.Errorf("a run printing %d '<': %d %.300v, want ok with its output", n, st, m)
	}
	// Its request: code of '&' as the caller sent it, half max_request.
	body := `{"code":"x = '` + strings.Repeat("&", maxRequest/2) + `'\nprint(len(x))"}`
	w := httptest.NewRecorder()
	f.g.Serve(w, httptest.NewRequest("POST", "/v1/run", strings.NewReader(body)).WithContext(ctx), "tenant-a", "")
	m = nil
	json.Unmarshal(w.Body.Bytes(), &m)
	if w.Code != 200 || m["verdict"] != "ok" || m["stdout"] != strconv.Itoa(maxRequest/2)+"\n" {
		t.Errorf("a run whose code holds %d '&': %d %.300v, want ok", maxRequest/2, w.Code, m)
	}
}

// A session request carries its body base64-encoded (4/3 of it): the
// node took a message of max_request + its envelope at most, so an exec
// whose body the gateway took (up to max_request) but over 3/4 of it was
// answered 400 "malformed cluster request" by the node.
func TestAttackSessionBodyNearMaxRequestRefused(t *testing.T) {
	const maxRequest = 256 << 10
	edit := func(c *Config) { c.MaxRequest = maxRequest }
	f := newFixtureWith(t, 1, edit)
	f.nodeEdit = edit
	f.startNode(f.hosts[0])
	ctx, cancel := context.WithTimeout(context.Background(), proctest.Budget(t, 2*time.Minute))
	defer cancel()
	sid, _ := f.newSession(ctx, "tenant-a")
	const n = maxRequest * 9 / 10
	code := "x = '" + strings.Repeat("a", n) + "'\nprint(len(x))"
	if st, _, m := f.do(ctx, "tenant-a", "", "POST", "/v1/sessions/"+sid+"/exec", map[string]any{"code": code}); st != 200 || m["stdout"] != strconv.Itoa(n)+"\n" {
		t.Errorf("an exec of %d bytes of code (max_request %d): %d %.300v, want it run", n, maxRequest, st, m)
	}
}
