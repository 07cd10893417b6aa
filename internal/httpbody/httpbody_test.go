package httpbody

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// A body up to the bound is read whole, whether its length is known or
// not (across several of Read's chunks); one byte more is ErrTooLarge;
// a known length over the bound is refused before any of it is read.
func TestReadBound(t *testing.T) {
	const max = 2*chunk + 10
	for _, tc := range []struct {
		name   string
		size   int
		length int64 // -1: unknown
		tooBig bool
	}{
		{"empty", 0, 0, false},
		{"small, known", 10, 10, false},
		{"small, unknown", 10, -1, false},
		{"at the bound, known", max, max, false},
		{"at the bound, unknown", max, -1, false},
		{"one chunk exactly, unknown", chunk, -1, false},
		{"one byte over, unknown", max + 1, -1, true},
		{"length over the bound", max + 1, max + 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := bytes.Repeat([]byte("x"), tc.size)
			src := &countingReader{r: bytes.NewReader(body)}
			b, err := Read(src, tc.length, max)
			switch {
			case tc.tooBig && !errors.Is(err, ErrTooLarge):
				t.Fatalf("%d bytes against %d: %v, want ErrTooLarge", tc.size, max, err)
			case tc.tooBig && tc.length > max && src.n != 0:
				t.Fatalf("a Content-Length over the bound read %d bytes, want none", src.n)
			case !tc.tooBig && (err != nil || !bytes.Equal(b, body)):
				t.Fatalf("read %d bytes, %v; want %d", len(b), err, tc.size)
			}
		})
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// A body shorter than its length is io.ErrUnexpectedEOF (io.EOF when none
// of it came), and the reader's own error is handed back as it is.
func TestReadErrors(t *testing.T) {
	if _, err := Read(strings.NewReader("abc"), 5, 10); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("3 of 5 bytes: %v", err)
	}
	if _, err := Read(strings.NewReader(""), 5, 10); !errors.Is(err, io.EOF) {
		t.Errorf("0 of 5 bytes: %v", err)
	}
	reset := errors.New("reset")
	for _, length := range []int64{5, -1} {
		if _, err := Read(iotest.ErrReader(reset), length, 10); err != reset {
			t.Errorf("length %d: %v, want the reader's error", length, err)
		}
	}
}

// A request made in process may say 0 for a body of unknown length (as
// net/http's client reads it): it is read to its end, not taken as
// empty; a server's request with no body says 0 with http.NoBody.
func TestReadWithinInProcessRequest(t *testing.T) {
	r := httptest.NewRequest("PUT", "/f", nil)
	r.Body, r.ContentLength = io.NopCloser(strings.NewReader("unknown length")), 0
	if b, err := ReadWithin(nil, r, 100, 0); err != nil || string(b) != "unknown length" {
		t.Fatalf("read %q, %v", b, err)
	}
	r = httptest.NewRequest("GET", "/f", nil)
	if Length(r) != 0 || r.Body != http.NoBody {
		t.Fatalf("no body: length %d, body %T", Length(r), r.Body)
	}
	if b, err := ReadWithin(nil, r, 100, 0); err != nil || len(b) != 0 {
		t.Fatalf("read %q, %v", b, err)
	}
}

// A body that stalls on a real connection ends at the deadline with a
// net.Error Timeout, which each caller answers with its 408.
func TestReadWithinStalledBody(t *testing.T) {
	got := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := ReadWithin(http.NewResponseController(w), r, 1000, 200*time.Millisecond)
		got <- err
		w.WriteHeader(408)
	}))
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc")
	select {
	case err := <-got:
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("a stalled body: %v, want a timeout", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a stalled body was still being read after 30s")
	}
}
