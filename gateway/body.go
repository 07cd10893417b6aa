package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"

	"github.com/stockade/stockade/internal/httpbody"
)

// bound reads the whole body before anything is forwarded, as the server
// reads its own: a Content-Length over --max-body is refused before a
// byte is read (413), a body without one is read to one byte past the
// bound and no further, and the whole body must arrive within
// --body-timeout (408), so that a slow caller holds a gateway's
// connection, never a node's. Then the tenant's policy is applied to a
// body that starts work. It answers and returns false when the request
// goes no further.
func (g *Gateway) bound(w http.ResponseWriter, r *http.Request, t *Tenant) bool {
	max := g.cfg.MaxBody
	rc := http.NewResponseController(w)
	// A body not read to its end ends the connection (reject).
	refuse := func(status int, msg string) bool {
		reject(w, status, msg)
		return false
	}
	if r.ContentLength > max {
		g.counts.tooLarge.Add(1)
		return refuse(http.StatusRequestEntityTooLarge, fmt.Sprintf("request body of %d bytes is larger than %d bytes (--max-body)", r.ContentLength, max))
	}
	body, err := httpbody.ReadWithin(rc, r, max, g.cfg.BodyTimeout)
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return refuse(http.StatusRequestTimeout, fmt.Sprintf("request body not received within %v", g.cfg.BodyTimeout))
	case errors.Is(err, httpbody.ErrTooLarge):
		g.counts.tooLarge.Add(1)
		return refuse(http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes (--max-body)", max))
	case err != nil:
		return refuse(http.StatusBadRequest, "read body: "+err.Error())
	}
	if startsWork(r) {
		if body, err = applyPolicy(t, body); err != nil {
			var pe *policyError
			if errors.As(err, &pe) {
				g.counts.policyRefused.Add(1)
				writeError(w, pe.status, pe.msg)
				return false
			}
			writeError(w, http.StatusBadRequest, err.Error())
			return false
		}
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	r.Header.Set("Content-Length", strconv.Itoa(len(body)))
	r.TransferEncoding = nil
	return true
}

// startsWork says whether the request makes a jail, and so carries a
// profile and limits the tenant's policy governs.
func startsWork(r *http.Request) bool {
	return r.Method == http.MethodPost && (r.URL.Path == "/v1/run" || r.URL.Path == "/v1/sessions")
}
