package httpbuf

import (
	"net/http"
	"time"
)

// Writer is an answer kept in memory up to max bytes of body.
type Writer struct {
	max    int64
	header http.Header
	status int
	body   []byte
	over   bool
}

// New is an empty answer that keeps at most max bytes of body.
func New(max int64) *Writer { return &Writer{max: max, header: http.Header{}} }

func (w *Writer) Header() http.Header { return w.header }

// WriteHeader keeps the first status written, as a connection sends it.
func (w *Writer) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

// Write keeps p, or past the bound drops the whole body and marks the
// answer Over. It always says all of p was written: a handler that saw
// an error could stop midway (a run's result half-sent), and what it
// writes after is dropped anyway.
func (w *Writer) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.over || int64(len(w.body)+len(p)) > w.max {
		w.over, w.body = true, nil
		return len(p), nil
	}
	w.body = append(w.body, p...)
	return len(p), nil
}

// SetWriteDeadline is http.ResponseController's: an answer in memory
// cannot stall, so there is nothing to bound and every deadline holds.
func (w *Writer) SetWriteDeadline(time.Time) error { return nil }

// Status is the status written, 200 when only a body (or nothing) was.
func (w *Writer) Status() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// Body is the body written; nil when it went past the bound.
func (w *Writer) Body() []byte { return w.body }

// Over says the body went past the bound and was dropped.
func (w *Writer) Over() bool { return w.over }
