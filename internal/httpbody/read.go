package httpbody

import (
	"errors"
	"io"
)

// chunk is how a body without a Content-Length is read: in chunks,
// joined once at the end, so it costs at most twice its size, never the
// three times of a buffer that doubles.
const chunk = 256 << 10

// ErrTooLarge is a body over its bound: its Content-Length said so
// (it was not read) or more than the bound came.
var ErrTooLarge = errors.New("request body too large")

// Read reads a whole body of length bytes (-1: unknown, up to max)
// into one slice of its size. Over max is ErrTooLarge; a body that
// ends early is io.ErrUnexpectedEOF (or io.EOF when nothing came), one
// that stalls past the connection's read deadline a net.Error Timeout.
func Read(r io.Reader, length, max int64) ([]byte, error) {
	if length > max {
		return nil, ErrTooLarge
	}
	if length >= 0 {
		b := make([]byte, length)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		return b, nil
	}
	var chunks [][]byte
	var total int64
	for {
		c := make([]byte, chunk)
		n, err := io.ReadFull(r, c)
		total += int64(n)
		if total > max {
			return nil, ErrTooLarge
		}
		chunks = append(chunks, c[:n])
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	b := make([]byte, 0, total)
	for _, c := range chunks {
		b = append(b, c...)
	}
	return b, nil
}
