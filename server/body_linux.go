package server

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/stockade/stockade/api"
)

// refuseBody answers a body that could not be read or decoded (408, 413,
// 400, 422); when some of it is still unread (unreadBody), the answer
// says the connection closes, and endUnreadBodies sees that it does.
func (s *Server) refuseBody(w http.ResponseWriter, err error) {
	if errors.As(err, new(unreadBody)) {
		w.Header().Set("Connection", "close")
	}
	s.writeError(w, s.bodyRefusal(err))
}

// unreadBody is a body whose reading failed: some of it may still be
// on the connection.
type unreadBody struct{ error }

func (u unreadBody) Unwrap() error { return u.error }

// endUnreadBodies ends the connection of every request whose handler
// returned without reading its body to the end: a refusal before the body
// (404, 403, 429), a body that stalled (408) or was too large (413).
// net/http reads what is left (up to 256 KiB, to keep the connection)
// before the answer and again when it closes the body, with no deadline,
// the handler's being cleared: a caller that stalled a small body never
// got its 408 and held the connection, and its place under --max-conns,
// for ever. A read deadline already past makes those reads fail at once,
// and net/http closes a connection whose body it could not finish. A body
// read to its end is left alone: a failed read behind it would cancel
// the context of the connection's later requests.
func endUnreadBodies(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
			h.ServeHTTP(w, r)
			return
		}
		b := &bodyRead{ReadCloser: r.Body, length: r.ContentLength}
		r.Body = b
		h.ServeHTTP(&closeIfUnread{ResponseWriter: w, b: b}, r)
		if b.unread() {
			_ = http.NewResponseController(w).SetReadDeadline(time.Unix(1, 0))
		}
	})
}

// closeIfUnread says in an answer's header that the connection closes
// when its request's body is not read to the end: a client that would
// keep the connection for its next request knows it will not be there.
type closeIfUnread struct {
	http.ResponseWriter
	b     *bodyRead
	wrote bool
}

func (c *closeIfUnread) WriteHeader(code int) {
	if !c.wrote && code >= 200 {
		c.wrote = true
		if c.b.unread() {
			c.Header().Set("Connection", "close")
		}
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *closeIfUnread) Write(p []byte) (int, error) {
	if !c.wrote {
		c.WriteHeader(http.StatusOK)
	}
	return c.ResponseWriter.Write(p)
}

func (c *closeIfUnread) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// bodyRead counts what was read of a body, and whether its end was.
type bodyRead struct {
	io.ReadCloser
	length int64 // its Content-Length, -1 if chunked
	n      int64
	eof    bool
}

// unread says whether some of the body may still be on the connection.
func (b *bodyRead) unread() bool {
	return !b.eof && (b.length < 0 || b.n < b.length)
}

func (b *bodyRead) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	if errors.Is(err, io.EOF) {
		b.eof = true
	}
	return n, err
}

// takeBodyShare takes the body's share of the budget before it is read,
// or answers why not: 413 for a Content-Length over --max-body (not read),
// 503 when the budget stays spent for --queue-wait.
func (s *Server) takeBodyShare(w http.ResponseWriter, r *http.Request) (int64, bool) {
	share := r.ContentLength
	if share > s.cfg.MaxBody {
		s.writeError(w, &api.Error{Status: 413, Msg: fmt.Sprintf("request body of %d bytes is larger than %d bytes (--max-body)", share, s.cfg.MaxBody)})
		return 0, false
	}
	if share < 0 { // chunked: it may be as large as --max-body
		share = s.cfg.MaxBody
	}
	switch err := s.bodies.take(r.Context(), share, s.cfg.QueueWait); {
	case errors.Is(err, errBodyBudget):
		retryAfter(w, s.cfg.QueueWait/4)
		s.refuse(w, r, &api.Error{Status: 503, Msg: fmt.Sprintf("busy: the request bodies being read, waiting or running hold %d of the %d bytes of --body-budget, and this one needs %d; waited %v",
			s.bodies.inUse(), s.cfg.BodyBudget, share, s.cfg.QueueWait)})
		return 0, false
	case err != nil:
		s.refuseStopped(w, err)
		return 0, false
	}
	return share, true
}
