package server

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
)

// boundResults is the server's word on the driver's rich results, which
// the cell can write: each rule drops what breaks it, and says so.
func TestBoundResultsHoldsTheDriversList(t *testing.T) {
	q := func(s string) json.RawMessage { b, _ := json.Marshal(s); return b }
	png := q(base64.StdEncoding.EncodeToString([]byte("\x89PNG\r\n\x1a\nrest")))
	bundle := func(kv ...any) RichResult {
		r := RichResult{Data: map[string]json.RawMessage{}}
		for i := 0; i < len(kv); i += 2 {
			r.Data[kv[i].(string)] = kv[i+1].(json.RawMessage)
		}
		return r
	}
	caps := richCaps{Count: 3, Bundle: 200, Bytes: 1000}
	ok := bundle("text/plain", q("ok"))
	manyTypes := bundle("text/plain", q("x"))
	for i := 0; i < maxBundleTypes; i++ {
		manyTypes.Data["a/t"+strings.Repeat("x", i)] = q("v")
	}
	for _, c := range []struct {
		name string
		r    RichResult
		keep bool
	}{
		{"text/plain alone", ok, true},
		{"HTML, PNG and JSON", bundle("text/plain", q("t"), "text/html", q("<b>"), "image/png", png, "application/json", json.RawMessage(`{"a":[1]}`)), true},
		{"vendor JSON", bundle("text/plain", q("t"), "application/vnd.x+json", json.RawMessage(`[1]`)), true},
		{"no text/plain", bundle("text/html", q("<b>")), false},
		{"text/plain not a string", bundle("text/plain", json.RawMessage(`7`)), false},
		{"HTML not a string", bundle("text/plain", q("t"), "text/html", json.RawMessage(`{"a":1}`)), false},
		{"a MIME name with upper case", bundle("text/plain", q("t"), "Text/HTML", q("<b>")), false},
		{"a MIME name without a subtype", bundle("text/plain", q("t"), "text/", q("x")), false},
		{"a MIME name with a space", bundle("text/plain", q("t"), "text/ht ml", q("x")), false},
		{"a long MIME name", bundle("text/plain", q("t"), "a/"+strings.Repeat("b", maxMIMETypeName), q("x")), false},
		{"image/png that is not a PNG", bundle("text/plain", q("t"), "image/png", q(base64.StdEncoding.EncodeToString([]byte("GIF89a")))), false},
		{"image/png not base64", bundle("text/plain", q("t"), "image/png", q("!!")), false},
		{"image/jpeg that is not a JPEG", bundle("text/plain", q("t"), "image/jpeg", png), false},
		{"over its bundle's bytes", bundle("text/plain", q(strings.Repeat("x", 200))), false},
		{"too many types", manyTypes, false},
	} {
		got, truncated := boundResults([]RichResult{c.r}, richCaps{Count: 3, Bundle: 1 << 20, Bytes: 1 << 20})
		if c.name == "over its bundle's bytes" {
			got, truncated = boundResults([]RichResult{c.r}, caps)
		}
		if kept := len(got) == 1; kept != c.keep || truncated == c.keep {
			t.Errorf("%s: kept %v, truncated %v; want kept %v", c.name, kept, truncated, c.keep)
		}
	}
	got, truncated := boundResults([]RichResult{ok, ok, ok, ok}, caps)
	if len(got) != 3 || !truncated {
		t.Errorf("past the count: %d kept, truncated %v", len(got), truncated)
	}
	big := bundle("text/plain", q(strings.Repeat("x", 150)))
	got, truncated = boundResults([]RichResult{big, big, big, big, big, big, big, ok}, richCaps{Count: 100, Bundle: 200, Bytes: 1000})
	if len(got) != 7 || !truncated || plain(got[6]) != "ok" {
		t.Errorf("past the total: %d kept (want the six that fit and the small one after), truncated %v", len(got), truncated)
	}
	if got, truncated := boundResults(nil, caps); got == nil || len(got) != 0 || truncated {
		t.Errorf("none: %v %v", got, truncated)
	}
}
