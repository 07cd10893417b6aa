package client

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/stockade/stockade/api"
)

// ErrTooLarge is an answer, or a stream's line, larger than the client
// reads (Options.MaxAnswer): the rest is not read.
var ErrTooLarge = errors.New("larger than the client reads")

// readAnswer reads a plain answer's body whole, holding at most max bytes:
// a Content-Length over it is refused before any read, and a body that
// runs past it (chunked, or lying) after max+1 bytes.
func readAnswer(resp *http.Response, max int64, what string) ([]byte, error) {
	if resp.ContentLength > max {
		return nil, fmt.Errorf("%s: an answer of %d bytes: %w (%d)", what, resp.ContentLength, ErrTooLarge, max)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s: an answer %w (%d bytes)", what, ErrTooLarge, max)
	}
	return b, nil
}

// readStream reads an NDJSON answer a line at a time, each at most max
// bytes: output lines go to out as they come, and the result line is
// returned. A stream that ends without one is an error (the server, or
// the connection, failed).
func readStream(r io.Reader, max int64, what string, out Output) ([]byte, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, min(max, 64<<10)), int(min(max, 1<<40)))
	for sc.Scan() {
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var l api.StreamLine
		if err := json.Unmarshal(line, &l); err != nil {
			return nil, fmt.Errorf("%s: a stream line that is not JSON: %.200q", what, line)
		}
		var w io.Writer
		switch l.Type {
		case api.StreamResult:
			return append([]byte(nil), line...), nil
		case api.StreamStdout:
			w = out.Stdout
		case api.StreamStderr:
			w = out.Stderr
		}
		if w != nil {
			if _, err := io.WriteString(w, l.Data); err != nil {
				return nil, fmt.Errorf("%s: write the %s: %w", what, l.Type, err)
			}
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("%s: a stream line %w (%d bytes)", what, ErrTooLarge, max)
		}
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return nil, fmt.Errorf("%s: the stream ended without a result", what)
}

// writeWhole hands the output of a result answered whole to a streamed
// request (a gateway's cluster answers a session's exec whole, and a
// resubmitted run that joins one already streaming)
// to out, stdout then stderr, so the caller gets it either way.
func writeWhole(body []byte, what string, out Output) error {
	var res struct {
		Stdout string `json:"stdout"`
		Stderr string `json:"stderr"`
	}
	if err := json.Unmarshal(body, &res); err != nil {
		return nil // not a result: do decodes it and says so
	}
	for _, o := range []struct {
		w    io.Writer
		data string
		name string
	}{{out.Stdout, res.Stdout, "stdout"}, {out.Stderr, res.Stderr, "stderr"}} {
		if o.w != nil && o.data != "" {
			if _, err := io.WriteString(o.w, o.data); err != nil {
				return fmt.Errorf("%s: write the %s: %w", what, o.name, err)
			}
		}
	}
	return nil
}
