package server

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
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
		var want RunRequest
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
		`{"code": "1", "limits": [1]}`:   `field "limits": want server.Limits, got JSON array`,
		`{"code": "1", "limits": {"pids": [` + strings.Repeat("1,", 10<<10) + `1]}}`: `a few short values`,
		`[1]`:              `want server.RunRequest, got JSON array`,
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
