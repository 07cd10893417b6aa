package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"testing"
)

// A character split between two chunks of output reaches the stream whole.
func TestStreamKeepsUTF8Whole(t *testing.T) {
	var out bytes.Buffer
	w := (&ndjson{w: &out}).stream("stdout")
	text := []byte("añ€😀z")
	for i := range text { // one byte at a time: every split there is
		w.Write(text[i : i+1])
	}
	w.Write([]byte{0xff}) // not UTF-8 at all: passed on, not held
	w.flush()
	var got string
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var l struct{ Data string }
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		got += l.Data
	}
	if got != "añ€😀z\uFFFD" {
		t.Errorf("got %q", got)
	}
}
