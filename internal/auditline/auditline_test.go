package auditline

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// short takes at most n bytes, then fails every write.
type short struct {
	bytes.Buffer
	n int
}

func (s *short) Write(p []byte) (int, error) {
	if len(p) <= s.n {
		s.n -= len(p)
		return s.Buffer.Write(p)
	}
	k := s.n
	s.Buffer.Write(p[:k])
	s.n = 0
	return k, errors.New("no space left on device")
}

// A line cut short leaves the next one beginning on a line of its own;
// a line that failed whole (nothing written) does not.
func TestTornLineIsFollowedByANewline(t *testing.T) {
	w := &short{n: 10}
	torn, err := Write(w, []byte("{\"a\":1}\n"), false)
	if err != nil || torn {
		t.Fatalf("a whole line: torn %v, %v", torn, err)
	}
	if torn, err = Write(w, []byte("{\"b\":2}\n"), torn); err == nil || !torn {
		t.Fatalf("a line cut short: torn %v, %v", torn, err)
	}
	w.n = 100
	if torn, err = Write(w, []byte("{\"c\":3}\n"), torn); err != nil || torn {
		t.Fatalf("the next line: torn %v, %v", torn, err)
	}
	if got, want := w.String(), "{\"a\":1}\n{\"\n{\"c\":3}\n"; got != want {
		t.Errorf("the file: %q, want %q", got, want)
	}
	w.n = 0
	if torn, err = Write(w, []byte("{\"d\":4}\n"), false); err == nil || torn {
		t.Errorf("a line nothing of which went in: torn %v, %v", torn, err)
	}
}

type shortNoErr struct{}

func (shortNoErr) Write(p []byte) (int, error) { return len(p) - 1, nil }

func TestShortWriteIsAnError(t *testing.T) {
	if torn, err := Write(shortNoErr{}, []byte("xy\n"), false); !errors.Is(err, io.ErrShortWrite) || !torn {
		t.Errorf("torn %v, %v; want torn and io.ErrShortWrite", torn, err)
	}
}
