package api

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// WriteJSON must produce exactly what encoding/json does, whatever the
// output holds and wherever a piece boundary falls.
func TestWriteJSONMatchesEncoder(t *testing.T) {
	euro := "\u20ac" // three bytes: a boundary can fall inside it
	cases := map[string]string{
		"empty":           "",
		"ascii":           strings.Repeat("hello\n", 20000),
		"invalid":         strings.Repeat("\xff\xfe", 40000),
		"control":         strings.Repeat("\x00\x01\x1b", 30000),
		"split runes":     strings.Repeat("a", jsonChunk-1) + strings.Repeat(euro, 50000),
		"cut rune at end": strings.Repeat(euro, 20000) + "\xe2\x82",
		"html and quotes": strings.Repeat(`<a href="x">&</a>\`, 5000),
		"mixed":           strings.Repeat("ok \xe2\x82 "+euro+"\x80\"", 9000),
	}
	for name, out := range cases {
		r := &Result{Verdict: VerdictOK, Stdout: out, Stderr: out + "err", BlockedSyscalls: []BlockedSyscall{}, Degraded: []string{}}
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(r); err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if err := r.WriteJSON(&got); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Errorf("%s: WriteJSON differs from encoding/json (%d vs %d bytes)", name, got.Len(), want.Len())
		}
	}
}
