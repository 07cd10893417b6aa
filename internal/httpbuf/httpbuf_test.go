package httpbuf

import (
	"net/http"
	"testing"
	"time"
)

// A body up to the bound is kept whole; one byte past it drops all of it,
// and so does every write after, each told it succeeded.
func TestBoundDropsTheBody(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes []string
		body   string
		over   bool
	}{
		{"nothing", nil, "", false},
		{"under", []string{"ab", "c"}, "abc", false},
		{"exactly the bound", []string{"abcd", "ef"}, "abcdef", false},
		{"one byte over", []string{"abcd", "efg"}, "", true},
		{"one write over", []string{"abcdefg"}, "", true},
		{"small writes after the bound", []string{"abcdefg", "h", ""}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := New(6)
			for _, s := range tc.writes {
				n, err := w.Write([]byte(s))
				if n != len(s) || err != nil {
					t.Fatalf("Write(%q) = %d, %v; want %d, nil", s, n, err, len(s))
				}
			}
			if w.Over() != tc.over || string(w.Body()) != tc.body {
				t.Fatalf("Over %v, Body %q; want %v, %q", w.Over(), w.Body(), tc.over, tc.body)
			}
			if tc.over && w.Body() != nil {
				t.Fatalf("Body %q kept past the bound", w.Body())
			}
		})
	}
}

// The status is the first one written; a body alone, or nothing, is 200.
func TestStatus(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(w *Writer)
		want  int
	}{
		{"nothing", func(w *Writer) {}, 200},
		{"body only", func(w *Writer) { w.Write([]byte("x")) }, 200},
		{"header", func(w *Writer) { w.WriteHeader(404) }, 404},
		{"first header wins", func(w *Writer) { w.WriteHeader(429); w.WriteHeader(500) }, 429},
		{"header after body", func(w *Writer) { w.Write([]byte("x")); w.WriteHeader(500) }, 200},
		{"header then a body over the bound", func(w *Writer) { w.WriteHeader(201); w.Write(make([]byte, 100)) }, 201},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := New(10)
			tc.write(w)
			if got := w.Status(); got != tc.want {
				t.Fatalf("Status() = %d, want %d", got, tc.want)
			}
		})
	}
}

// The headers a handler sets are the answer's, before and after its
// status, and a new answer's are empty, never nil.
func TestHeaders(t *testing.T) {
	w := New(10)
	if w.Header() == nil || len(w.Header()) != 0 {
		t.Fatalf("a new answer's headers: %v", w.Header())
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(503)
	w.Header().Set("Retry-After", "1")
	if got := w.Header().Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type %q", got)
	}
	if got := w.Header().Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After %q", got)
	}
}

// A handler that bounds its writes through http.ResponseController is
// not refused: the deadline is taken, and the answer stays whole.
func TestWriteDeadlineIsTaken(t *testing.T) {
	w := New(10)
	if err := http.NewResponseController(w).SetWriteDeadline(time.Now().Add(time.Second)); err != nil {
		t.Fatalf("SetWriteDeadline: %v", err)
	}
	w.Write([]byte("ok"))
	if string(w.Body()) != "ok" || w.Over() {
		t.Fatalf("Body %q, Over %v", w.Body(), w.Over())
	}
}
