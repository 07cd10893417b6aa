package server

import (
	"errors"
	"fmt"
	"net/http"
)

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
