package httpbody

import (
	"net/http"
	"time"
)

// ReadWithin reads r's body whole with Read, at most max bytes, within
// timeout: the connection's read deadline is set first (a body trickled
// in or stalled holds its memory, and the header's deadline does not
// cover it) and lifted after, since it also bounds net/http's own read
// that watches for the caller going away. A timeout of 0 sets none, for a
// body already in memory (rc may then be nil).
func ReadWithin(rc *http.ResponseController, r *http.Request, max int64, timeout time.Duration) ([]byte, error) {
	if timeout > 0 {
		_ = rc.SetReadDeadline(time.Now().Add(timeout))
		defer func() { _ = rc.SetReadDeadline(time.Time{}) }()
	}
	return Read(r.Body, Length(r), max)
}

// Length is r's body's length as Read takes it, -1 when unknown. A
// server's request says 0 only for no body; one made in process (the
// gateway's own, a test's) may say 0 for a body of unknown length, as
// net/http's client reads it, and is read to its end.
func Length(r *http.Request) int64 {
	if r.ContentLength == 0 && r.Body != nil && r.Body != http.NoBody {
		return -1
	}
	return r.ContentLength
}
