package cluster

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
)

// The backend's body bound (max_request): up to it the body is read
// whole, one byte past it is false (the 413), and a failed read is the
// reader's error (the 400).
func TestReadBounded(t *testing.T) {
	for _, tc := range []struct {
		body string
		ok   bool
	}{{"", true}, {"12345", true}, {"123456", false}} {
		b, ok, err := readBounded(httptest.NewRequest("POST", "/v1/run", strings.NewReader(tc.body)), 5)
		if err != nil || ok != tc.ok || ok && string(b) != tc.body {
			t.Errorf("%q against 5 bytes: %q, %v, %v; want ok %v", tc.body, b, ok, err, tc.ok)
		}
	}
	r := httptest.NewRequest("POST", "/v1/run", iotest.ErrReader(errors.New("reset")))
	if _, _, err := readBounded(r, 5); err == nil || err.Error() != "reset" {
		t.Errorf("a failed read: %v", err)
	}
}
