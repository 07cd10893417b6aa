package mcp

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stockade/stockade/api"
)

// streamingBackend's Exec hands its chunks to onOutput, one
// every gap, then answers ok.
type streamingBackend struct {
	fakeBackend
	chunks []string
	gap    time.Duration
}

func (b *streamingBackend) Exec(_ context.Context, id string, _ *api.ExecRequest, onOutput OutputFunc) (*api.ExecResult, error) {
	b.record("exec " + id)
	for _, c := range b.chunks {
		if onOutput != nil {
			onOutput("stdout", c)
		}
		time.Sleep(b.gap)
	}
	return &api.ExecResult{Verdict: api.ExecOK}, nil
}

// progressClient connects a client that records every progress
// notification of the server NewServer(b) makes.
func progressClient(t *testing.T, b Backend) (*sdk.ClientSession, func() []*sdk.ProgressNotificationParams) {
	t.Helper()
	var mu sync.Mutex
	var got []*sdk.ProgressNotificationParams
	cs := connectWith(t, b, &sdk.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, r.Params)
		}})
	return cs, func() []*sdk.ProgressNotificationParams {
		mu.Lock()
		defer mu.Unlock()
		return append([]*sdk.ProgressNotificationParams(nil), got...)
	}
}

// TestProgressCarriesOutputBounded: with a progressToken, run_python's
// output comes as notifications, in order, each message bounded however
// much the program printed at once; without one, none is sent.
func TestProgressCarriesOutputBounded(t *testing.T) {
	big := strings.Repeat("y", 3*maxProgressText)
	b := &streamingBackend{chunks: []string{"first\n", big, "last\n"}, gap: 2 * progressEvery}
	cs, got := progressClient(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	params := &sdk.CallToolParams{Name: "run_python", Arguments: map[string]any{"session_id": "abc", "code": "x"}}
	params.SetProgressToken("tok")
	if res, err := cs.CallTool(ctx, params); err != nil || res.IsError {
		t.Fatalf("run_python: %v %v", err, res)
	}
	notes := got()
	var all strings.Builder
	last := 0.0
	for _, n := range notes {
		if n.ProgressToken != "tok" || n.Progress <= last || len(n.Message) > maxProgressText+100 {
			t.Errorf("a notification: token %v, progress %v after %v, %d bytes", n.ProgressToken, n.Progress, last, len(n.Message))
		}
		last = n.Progress
		all.WriteString(n.Message)
	}
	text := all.String()
	if !strings.HasPrefix(text, "first\n") || !strings.Contains(text, "bytes more") || !strings.HasSuffix(strings.TrimRight(text, "\n"), "last") {
		t.Errorf("the notifications' messages, in order (%d of them): %.200q ... %.200q", len(notes), text, text[max(0, len(text)-200):])
	}
	n := len(got())
	if res := call(t, cs, "run_python", map[string]any{"session_id": "abc", "code": "x"}); res.IsError {
		t.Fatal(text)
	}
	if len(got()) != n {
		t.Errorf("notifications without a progressToken: %d", len(got())-n)
	}
}
