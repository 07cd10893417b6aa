package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/stockade/stockade/api"
)

// sessionPath is a session's route: its id escaped as one path segment.
func sessionPath(id string) string { return "/v1/sessions/" + url.PathEscape(id) }

// filePath is a path in a session's /work as the files route takes it:
// each component escaped, the slashes kept.
func filePath(id, p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return sessionPath(id) + "/files/" + strings.Join(parts, "/")
}

// CreateSession starts a session: a jail whose interpreter keeps its
// state from one exec to the next.
func (cl *Client) CreateSession(ctx context.Context, req *api.SessionRequest) (*api.SessionCreated, error) {
	c, err := jsonCall(http.MethodPost, "/v1/sessions", req, 201)
	if err != nil {
		return nil, err
	}
	var s api.SessionCreated
	if err := cl.do(ctx, c, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// Exec runs one cell in session id and returns how it ended: every
// verdict is a result (200); an error is a refusal (*Error: the session
// is gone, busy, the request is wrong) or no answer.
func (cl *Client) Exec(ctx context.Context, id string, req *api.ExecRequest) (*api.ExecResult, error) {
	return cl.exec(ctx, id, req, nil)
}

// ExecStream is Exec with the cell's output streamed to out as it comes.
func (cl *Client) ExecStream(ctx context.Context, id string, req *api.ExecRequest, out Output) (*api.ExecResult, error) {
	return cl.exec(ctx, id, req, &out)
}

func (cl *Client) exec(ctx context.Context, id string, req *api.ExecRequest, out *Output) (*api.ExecResult, error) {
	c, err := jsonCall(http.MethodPost, sessionPath(id)+"/exec", req, 200)
	if err != nil {
		return nil, err
	}
	c.stream = out
	var res api.ExecResult
	if err := cl.do(ctx, c, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Interrupt stops the exec running in session id (KeyboardInterrupt);
// that exec's own answer says how it ended.
func (cl *Client) Interrupt(ctx context.Context, id string) error {
	var a api.Interrupting
	return cl.do(ctx, call{method: http.MethodPost, target: sessionPath(id) + "/interrupt", ok: 202}, &a)
}

// SetTTL ends session id ttl from now ("30m"), and returns its info.
func (cl *Client) SetTTL(ctx context.Context, id, ttl string) (*api.SessionInfo, error) {
	c, err := jsonCall(http.MethodPost, sessionPath(id)+"/ttl", &api.TTLRequest{TTL: ttl}, 200)
	if err != nil {
		return nil, err
	}
	var info api.SessionInfo
	if err := cl.do(ctx, c, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// Restart gives session id a fresh interpreter, /work and /tmp kept.
func (cl *Client) Restart(ctx context.Context, id string) (*api.RestartResult, error) {
	var r api.RestartResult
	if err := cl.do(ctx, call{method: http.MethodPost, target: sessionPath(id) + "/restart", ok: 200}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Session is GET /v1/sessions/{id}.
func (cl *Client) Session(ctx context.Context, id string) (*api.SessionInfo, error) {
	var info api.SessionInfo
	if err := cl.do(ctx, call{method: http.MethodGet, target: sessionPath(id), ok: 200}, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// Sessions lists the caller's sessions.
func (cl *Client) Sessions(ctx context.Context) ([]api.SessionInfo, error) {
	var l api.SessionList
	if err := cl.do(ctx, call{method: http.MethodGet, target: "/v1/sessions", ok: 200}, &l); err != nil {
		return nil, err
	}
	return l.Sessions, nil
}

// EndSession closes session id and returns its accounting.
func (cl *Client) EndSession(ctx context.Context, id string) (*api.SessionEnd, error) {
	var end api.SessionEnd
	if err := cl.do(ctx, call{method: http.MethodDelete, target: sessionPath(id), ok: 200}, &end); err != nil {
		return nil, err
	}
	return &end, nil
}

// ListFiles lists directory dir of session id's /work ("" for /work).
func (cl *Client) ListFiles(ctx context.Context, id, dir string) (*api.FileList, error) {
	target := sessionPath(id) + "/files"
	if dir != "" {
		target += "?path=" + url.QueryEscape(dir)
	}
	var l api.FileList
	if err := cl.do(ctx, call{method: http.MethodGet, target: target, ok: 200}, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// ReadFile reads path in session id's /work, at most max bytes (0: the
// client's bound): a larger file is refused (ErrTooLarge), not cut.
func (cl *Client) ReadFile(ctx context.Context, id, path string, max int64) ([]byte, error) {
	if max <= 0 || max > cl.max {
		max = cl.max
	}
	c := call{method: http.MethodGet, target: filePath(id, path), ok: 200}
	resp, err := cl.openFile(ctx, c)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return readAnswer(resp, max, c.method+" "+c.target)
}

// OpenFile opens path in session id's /work for reading, for a caller
// that reads it as it comes or to a bound of its own: the file's bytes
// (to be closed) and their number (-1: the answer did not say).
func (cl *Client) OpenFile(ctx context.Context, id, path string) (io.ReadCloser, int64, error) {
	resp, err := cl.openFile(ctx, call{method: http.MethodGet, target: filePath(id, path), ok: 200})
	if err != nil {
		return nil, 0, err
	}
	return resp.Body, resp.ContentLength, nil
}

// openFile sends c, a file's GET, and returns its answer, the body
// unread; a refusal is an *Error.
func (cl *Client) openFile(ctx context.Context, c call) (*http.Response, error) {
	resp, err := cl.open(ctx, c)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 {
		defer resp.Body.Close()
		// The refusal's body is small; the bound holds for it too.
		b, err := readAnswer(resp, cl.max, c.method+" "+c.target)
		if err != nil {
			return nil, err
		}
		return nil, refusal(c, resp.StatusCode, b)
	}
	return resp, nil
}

// WriteFile writes r's bytes to path in session id's /work, creating its
// directories; the body streams, the server's --max-body bounds it.
func (cl *Client) WriteFile(ctx context.Context, id, path string, r io.Reader) (*api.FileWritten, error) {
	var w api.FileWritten
	c := call{method: http.MethodPut, target: filePath(id, path), body: r, ctype: "application/octet-stream", ok: 201}
	if err := cl.do(ctx, c, &w); err != nil {
		return nil, err
	}
	return &w, nil
}

// DeleteFile removes path (a file, or an empty directory) from session
// id's /work.
func (cl *Client) DeleteFile(ctx context.Context, id, path string) error {
	var d api.FileDeleted
	if err := cl.do(ctx, call{method: http.MethodDelete, target: filePath(id, path), ok: 200}, &d); err != nil {
		return err
	}
	if d.Deleted == "" {
		return fmt.Errorf("DELETE %s: the answer names no path", filePath(id, path))
	}
	return nil
}
