package server

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/internal/httpbody"
)

// decodeRequest unescapes the request's strings in place, over the body;
// what it decodes must be what json.Unmarshal decodes, for every string
// the JSON scanner accepts: escapes, surrogate pairs, unpaired surrogates
// (U+FFFD), invalid UTF-8 (U+FFFD, decoded into a copy).
func FuzzDecodeRequestMatchesUnmarshal(f *testing.F) {
	for _, s := range []string{`""`, `"plain"`, `"a\nb\t\"q\" \\ \/ \b\f\r"`, `"\u00e9\u20ac"`, `"\ud83d\ude00"`,
		`"\ud800"`, `"\ud800\u0041"`, `"\udc00\ud800"`, `"\ud800\ud800\udc00"`, `"x\u0000y"`, "\"\xff\xfe\"", `"é€😀"`, `null`, `5`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, lit string) {
		body := `{"code": ` + lit + `, "argv": [` + lit + `], "stdin": ` + lit + `, "files": {"f": ` + lit + `}}`
		var want api.RunRequest
		wantErr := json.Unmarshal([]byte(body), &want)
		got, err := decodeRequest([]byte(body))
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("%q: decodeRequest error %v, json.Unmarshal error %v", body, err, wantErr)
		}
		if err != nil {
			return
		}
		if !reflect.DeepEqual(got, &want) {
			t.Fatalf("%q:\ndecodeRequest  %+v\njson.Unmarshal %+v", body, got, &want)
		}
	})
}

// The errors name the field, in RunRequest's terms.
func TestDecodeRequestErrors(t *testing.T) {
	for body, want := range map[string]string{
		`{"code": "1", "network": true}`: `unknown field "network"`,
		`{"code": 5}`:                    `field "code": want a string, got JSON 5`,
		`{"argv": "true"}`:               `field "argv": want []string, got JSON string`,
		`{"argv": ["true", 5]}`:          `field "argv[1]": want a string`,
		`{"files": {"f": {}}}`:           `field "files[\"f\"]": want a string`,
		`{"code": "1", "limits": [1]}`:   `field "limits": want api.Limits, got JSON array`,
		`{"code": "1", "limits": {"pids": [` + strings.Repeat("1,", 10<<10) + `1]}}`: `a few short values`,
		`[1]`:              `want api.RunRequest, got JSON array`,
		`{"code": "1"} {}`: `malformed JSON`,
		`{"code": "1"`:     `malformed JSON`,
		``:                 `malformed JSON`,
	} {
		_, err := decodeRequest([]byte(body))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", body, err, want)
		}
	}
	// As json.Unmarshal matches fields: case-insensitively. A limit's
	// number is kept as written, for the profile decoder.
	if req, err := decodeRequest([]byte(`{"Code": "1", "LIMITS": {"cpus": 0.5, "pids": 3}}`)); err != nil || *req.Code != "1" ||
		req.Limits["cpus"] != json.Number("0.5") || req.Limits["pids"] != json.Number("3") {
		t.Errorf("case-insensitive fields, limits: %+v %v", req, err)
	}
}

// allocated is what f allocates, in bytes.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A request's code, stdin and files are megabytes each at most; decoding
// them into strings of their own (and the files' base64 once more to
// check them) made every body cost the server twice its size or more.
// Decoded and validated, they share the body's memory, escapes and all.
func TestDecodeRequestSharesTheBody(t *testing.T) {
	file := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0, 1, 2, 0xff}, 3<<20/4))
	body := []byte(`{"code": "` + strings.Repeat(`print(\"x\")\n`, 128<<10) + `", "stdin": "` + strings.Repeat("a", 2<<20) +
		`", "files": {"f": "` + file + `"}}`)
	req := &runRequest{}
	var err error
	n := allocated(func() {
		if req.RunRequest, err = decodeRequest(body); err == nil {
			err = req.validate(1024)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if *req.Code != strings.Repeat("print(\"x\")\n", 128<<10) || len(req.Stdin) != 2<<20 || req.inputs["f"].size != 3<<20 {
		t.Fatalf("decoded wrong: code %d bytes, stdin %d, file %d", len(*req.Code), len(req.Stdin), req.inputs["f"].size)
	}
	t.Logf("a body of %d bytes: %d bytes allocated to decode and check it", len(body), n)
	if n > 256<<10 {
		t.Errorf("decoding and checking a body of %d bytes allocated %d bytes: its strings do not share its memory", len(body), n)
	}
}

// timeoutErr is a read that ran past the connection's deadline.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// A body read's failures as the server answers them: the status and the
// words each caller sees (the deadline's stays an error, bodyRefusal's 408).
func TestBodyErrorAnswers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		body   io.Reader
		length int64
		status int
		msg    string
	}{
		{"Content-Length over the bound", strings.NewReader(""), 11, 413, "request body larger than 10 bytes (--max-body)"},
		{"chunked over the bound", strings.NewReader(strings.Repeat("a", 11)), -1, 413, "request body larger than 10 bytes (--max-body)"},
		{"ends early", strings.NewReader("abc"), 5, 400, "request body ended before its Content-Length of 5 bytes"},
		{"nothing came", strings.NewReader(""), 5, 400, "request body ended before its Content-Length of 5 bytes"},
		{"read fails", iotest.ErrReader(errors.New("reset")), -1, 400, "read body: reset"},
		{"stalls", iotest.ErrReader(timeoutErr{}), 5, 0, "read body: i/o timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := httpbody.Read(tc.body, tc.length, 10)
			if err == nil {
				t.Fatalf("read %q, want an error", b)
			}
			err = bodyError(err, tc.length, 10)
			var ae *api.Error
			switch {
			case tc.status == 0:
				var ne net.Error
				if errors.As(err, &ae) || !errors.As(err, &ne) || !ne.Timeout() || err.Error() != tc.msg {
					t.Fatalf("%v (%T), want the deadline's error %q", err, err, tc.msg)
				}
			case !errors.As(err, &ae) || ae.Status != tc.status || ae.Msg != tc.msg:
				t.Fatalf("%v, want %d %q", err, tc.status, tc.msg)
			}
		})
	}
	for _, body := range []string{"", "0123456789"} {
		for _, length := range []int64{int64(len(body)), -1} {
			if b, err := httpbody.Read(strings.NewReader(body), length, 10); err != nil || string(b) != body {
				t.Errorf("httpbody.Read(%q, %d) = %q, %v", body, length, b, err)
			}
		}
	}
}
