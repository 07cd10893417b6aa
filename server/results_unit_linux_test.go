package server

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/stockade/stockade/api"
)

// boundResults is the server's word on the driver's rich results, which
// the cell can write: each rule drops what breaks it, and says so.
func TestBoundResultsHoldsTheDriversList(t *testing.T) {
	q := func(s string) json.RawMessage { b, _ := json.Marshal(s); return b }
	png := q(base64.StdEncoding.EncodeToString([]byte("\x89PNG\r\n\x1a\nrest")))
	bundle := func(kv ...any) api.RichResult {
		r := api.RichResult{Data: map[string]json.RawMessage{}}
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
		r    api.RichResult
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
		{"a PDF", bundle("text/plain", q("t"), "application/pdf", q(base64.StdEncoding.EncodeToString([]byte("%PDF-1.4\n")))), true},
		{"application/pdf not base64", bundle("text/plain", q("t"), "application/pdf", q("abc")), false},
		{"application/pdf that is not a PDF", bundle("text/plain", q("t"), "application/pdf", png), false},
		{"over its bundle's bytes", bundle("text/plain", q(strings.Repeat("x", 200))), false},
		{"too many types", manyTypes, false},
	} {
		got, truncated := boundResults([]api.RichResult{c.r}, richCaps{Count: 3, Bundle: 1 << 20, Bytes: 1 << 20})
		if c.name == "over its bundle's bytes" {
			got, truncated = boundResults([]api.RichResult{c.r}, caps)
		}
		if kept := len(got) == 1; kept != c.keep || truncated == c.keep {
			t.Errorf("%s: kept %v, truncated %v; want kept %v", c.name, kept, truncated, c.keep)
		}
	}
	got, truncated := boundResults([]api.RichResult{ok, ok, ok, ok}, caps)
	if len(got) != 3 || !truncated {
		t.Errorf("past the count: %d kept, truncated %v", len(got), truncated)
	}
	big := bundle("text/plain", q(strings.Repeat("x", 150)))
	got, truncated = boundResults([]api.RichResult{big, big, big, big, big, big, big, ok}, richCaps{Count: 100, Bundle: 200, Bytes: 1000})
	if len(got) != 7 || !truncated || plain(got[6]) != "ok" {
		t.Errorf("past the total: %d kept (want the six that fit and the small one after), truncated %v", len(got), truncated)
	}
	if got, truncated := boundResults(nil, caps); got == nil || len(got) != 0 || truncated {
		t.Errorf("none: %v %v", got, truncated)
	}
}

// A cell can write the driver's answer itself (fd 3): a frame of millions
// of tiny results. The server decodes it within the caps, element by
// element, rather than into millions of results first (review c3.py: a
// 28 MiB frame cost 386 MiB allocated, 252 MiB held). Bytes allocated are
// counted (runtime.MemStats), not timed.
func TestAttackForgedResultsAmplifyMemory(t *testing.T) {
	const frame = 8 << 20
	var b bytes.Buffer
	b.WriteString(`{"token":"x","status":"ok","result":null,"error":null,"images":[],"images_truncated":false,"results_truncated":false,"results":[`)
	for b.Len() < frame {
		b.WriteString(`{"data":{}},{"data":{"text/plain":"x"}},`)
	}
	b.WriteString(`{"data":{"text/plain":"x"}}]}`)
	body := b.Bytes()
	caps := answerCaps{resultChars: 1 << 18, imageBytes: 8 << 20, images: maxImages, results: richCapsOf(8<<20, nil)}
	a := driverAnswer{Images: answerImages{caps: caps}, Results: answerResults{caps: caps.results}}
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	err := json.Unmarshal(body, &a)
	runtime.ReadMemStats(&m1)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(a.Results.List); n != maxResults || !a.Results.Cut {
		t.Errorf("held %d results, cut %v; want %d, cut", n, a.Results.Cut, maxResults)
	}
	// Decoding the whole list first allocates ~14 bytes per byte of the
	// frame; within the caps, a few kilobytes per result looked at.
	if alloc := m1.TotalAlloc - m0.TotalAlloc; alloc > uint64(len(body))/4 {
		t.Errorf("decoding a %d-byte frame allocated %d bytes: the results were decoded before the caps", len(body), alloc)
	}
	// Nothing cut: a list within the caps is held whole, in order.
	var c answerResults
	c.caps = richCaps{Count: 3, Bundle: 100, Bytes: 1000}
	if err := json.Unmarshal([]byte(`[{"data":{"text/plain":"a"},"is_main_result":true,"truncated":false},{"data":{"text/plain":"b"}}]`), &c); err != nil ||
		len(c.List) != 2 || c.Cut || plain(c.List[0]) != "a" || !c.List[0].IsMainResult || plain(c.List[1]) != "b" {
		t.Errorf("a list within the caps: %v %+v", err, c)
	}
	// Each bundle is read key by key: one of a million types, an unknown
	// field or a bundle past its bytes is dropped, and the rest are kept.
	many := `{"data":{"text/plain":"x"` + strings.Repeat(`,"a/b":1`, 1<<20) + `}}`
	for _, bad := range []string{many, `{"data":{"text/plain":"x"},"extra":1}`, `{"data":{"text/plain":"` + strings.Repeat("x", 2000) + `"}}`, `{"data":null}`, `7`} {
		if err := json.Unmarshal([]byte(`[`+bad+`,{"data":{"text/plain":"ok"}}]`), &c); err != nil || len(c.List) != 1 || !c.Cut || plain(c.List[0]) != "ok" {
			t.Errorf("%.40s...: %v %+v", bad, err, c)
		}
	}
}
