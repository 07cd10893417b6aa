package server

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// refuseBody answers a body that could not be read or decoded (408, 413,
// 400, 422). When its body was not read whole (unreadBody) it also ends
// the connection after the answer: net/http reads what is left (up to
// 256 KiB, to keep the connection) before the answer and again when it
// closes the body, with no deadline, the handler's being cleared, so a
// caller that stalled a small body never got its 408 and held the
// connection, and its place under --max-conns, for ever. A read deadline
// already past makes those reads fail at once, and net/http closes a
// connection whose body it could not finish.
func (s *Server) refuseBody(w http.ResponseWriter, err error) {
	if errors.As(err, new(unreadBody)) {
		endBody(w)
	}
	s.writeError(w, s.bodyRefusal(err))
}

// unreadBody is a body whose reading failed: some of it may still be
// on the connection.
type unreadBody struct{ error }

func (u unreadBody) Unwrap() error { return u.error }

// endBody makes every later read of the request's body fail at once (see
// refuseBody), and says the connection closes after the answer: a body
// read whole whose reader never saw its end (the last write to /work
// failed) would otherwise keep a connection whose background read failed
// on the past deadline, and net/http cancels the context of every later
// request on it. Call it before the answer's header is written.
func endBody(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	_ = http.NewResponseController(w).SetReadDeadline(time.Unix(1, 0))
}

// takeBodyShare takes the body's share of the budget before it is read,
// or answers why not: 413 for a Content-Length over --max-body (not read),
// 503 when the budget stays spent for --queue-wait.
func (s *Server) takeBodyShare(w http.ResponseWriter, r *http.Request) (int64, bool) {
	share := r.ContentLength
	if share > s.cfg.MaxBody {
		s.writeError(w, &apiError{Status: 413, Msg: fmt.Sprintf("request body of %d bytes is larger than %d bytes (--max-body)", share, s.cfg.MaxBody)})
		return 0, false
	}
	if share < 0 { // chunked: it may be as large as --max-body
		share = s.cfg.MaxBody
	}
	switch err := s.bodies.take(r.Context(), share, s.cfg.QueueWait); {
	case errors.Is(err, errBodyBudget):
		retryAfter(w, s.cfg.QueueWait/4)
		s.refuse(w, r, &apiError{Status: 503, Msg: fmt.Sprintf("busy: the request bodies being read, waiting or running hold %d of the %d bytes of --body-budget, and this one needs %d; waited %v",
			s.bodies.inUse(), s.cfg.BodyBudget, share, s.cfg.QueueWait)})
		return 0, false
	case err != nil:
		s.refuseStopped(w, err)
		return 0, false
	}
	return share, true
}
