package server

import (
	"strings"
	"testing"
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
