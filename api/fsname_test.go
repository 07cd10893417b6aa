package api

import (
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// A path that is UTF-8 is written as encoding/json reads it back; one that
// is not gets surrogate escapes, still valid JSON, and a key of its own.
func FuzzFSNameIsJSON(f *testing.F) {
	for _, s := range []string{"plain", "a\"b\\c", "tab\tnl\n\x01\x1f", "\u2028\u2029", "é€😀", "\xfe", "\xff", "\ufffd", "caf\xc3\xa9-\xe9", "\xed\xa0\x80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := appendFSName(nil, s)
		if !json.Valid(b) {
			t.Fatalf("%q: %s is not JSON", s, b)
		}
		var back string
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if utf8.ValidString(s) && back != s {
			t.Fatalf("%q came back as %q", s, back)
		}
		m, err := json.Marshal(FileMap{s: "eA==", "\ufffd": "eQ=="})
		if err != nil || !json.Valid(m) {
			t.Fatalf("%q: %s %v", s, m, err)
		}
	})
}

func TestFSNameKeysDistinct(t *testing.T) {
	b, err := json.Marshal(FileMap{"\xfe": "MQ==", "\xff": "Mg==", "\ufffd": "Mw=="})
	if want := `{"�":"Mw==","\udcfe":"MQ==","\udcff":"Mg=="}`; err != nil || string(b) != want {
		t.Errorf("%s %v, want %s", b, err, want)
	}
	b, err = json.Marshal(SkippedList{"l\xfe: a symlink"})
	if want := `["l\udcfe: a symlink"]`; err != nil || string(b) != want {
		t.Errorf("%s %v, want %s", b, err, want)
	}
}
