package server

import (
	"context"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// What the model reads of a cell: these tests hold the text of an exec's
// and a run's answer to what the caller's code did, and nothing of the
// machinery that ran it.

// A cell that does not compile shows the cell's line and the error, as
// Python shows a script's, and no frame of the driver or of ast.parse
// (which the driver's parse of the cell used to leave on top).
func TestSyntaxErrorShowsTheCellOnly(t *testing.T) {
	s := startServer(t, "--pool", "1")
	id := s.session(SessionRequest{}).SessionID
	for _, c := range []struct{ code, want string }{
		{"x = 1\ny = (", `File "<cell 1>", line 2`},
		{"return 5", `File "<cell 2>", line 1`},
		{"print(1)\n1 +", `File "<cell 3>", line 2`},
	} {
		r := s.cell(id, c.code)
		if r.Verdict != ExecException || r.Error == nil || r.Error.Name != "SyntaxError" || r.Stdout != "" {
			t.Fatalf("%q: want a SyntaxError before any line ran: %+v", c.code, r)
		}
		tb := r.Error.Traceback
		if !strings.Contains(tb, c.want) || strings.Contains(tb, "Traceback (most recent call last)") ||
			strings.Contains(tb, "ast.py") || strings.Contains(tb, "driver") {
			t.Errorf("%q: the traceback is the cell's line and the error only:\n%s", c.code, tb)
		}
	}
	r := s.run(RunRequest{Code: code("x = 1\ny = (")})
	if r.ExitCode != 1 || !strings.Contains(r.Stderr, `File "<code>", line 2`) || !strings.Contains(r.Stderr, "SyntaxError") ||
		strings.Contains(r.Stderr, "Traceback (most recent call last)") || strings.Contains(r.Stderr, "stockade") {
		t.Errorf("a single-use run's syntax error is the code's line and the error only: %+v", r.Result)
	}
}

// A network attempt in a jail without network: the model must read why,
// in the text it gets (stderr, and MCP's text content), not only in the
// network list many hosts never show it. The line is the CLI's own,
// marked as stockade's, after the program's output.
func TestNetworkRefusalIsInTheText(t *testing.T) {
	s := startServer(t, "--pool", "1")
	const probe = "import socket\ntry:\n    socket.getaddrinfo('example.com', 443)\nexcept OSError as e:\n    print('lookup failed:', e)\n"
	const want = "stockade: network: this jail has no network (name lookup via 127.0.0.1:53 refused); see --allow-net\n"
	id := s.session(SessionRequest{}).SessionID
	r := s.cell(id, probe)
	if r.Verdict != ExecOK || !strings.HasPrefix(r.Stdout, "lookup failed:") || r.Stderr != want || r.StderrBytes != 0 {
		t.Errorf("a session's exec: stderr %q, want %q: %+v", r.Stderr, want, r)
	}
	if r := s.cell(id, "import sys\nprint('own', end='', file=sys.stderr)\n"+probe); r.Stderr != "own\n"+want {
		t.Errorf("the line after the cell's own stderr: %q", r.Stderr)
	}
	if r := s.cell(id, "1"); r.Stderr != "" {
		t.Errorf("an exec without network attempts gets no line: %q", r.Stderr)
	}
	run := s.run(RunRequest{Code: code(probe)})
	if run.Stderr != want {
		t.Errorf("a single-use run's stderr %q, want %q", run.Stderr, want)
	}

	cs := mcpSession(t, s)
	for _, args := range []map[string]any{{"code": probe}, {"code": probe, "session_id": id}} {
		res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "run_python", Arguments: args})
		if err != nil || !strings.Contains(mcpText(res), "stderr:\n"+want) {
			t.Errorf("MCP run_python %v: the text says nothing of the refusal: %v\n%s", args["session_id"], err, mcpText(res))
		}
	}
}
