package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"unicode/utf8"
)

// jsonChunk is how much captured output is escaped at a time.
const jsonChunk = 32 << 10

// WriteJSON writes r as one JSON object and a newline, as encoding/json
// would (HTML characters left alone), without building it in memory: the
// captured streams are escaped piece by piece straight to w. Escaping can
// make output six times larger (every invalid UTF-8 byte becomes \ufffd,
// every control byte \u00XX); built whole, --output-limit 64M of invalid
// bytes took 3.5 GB of stockade's memory, outside any cgroup. Streamed,
// stockade holds the captured bytes (at most --output-limit per stream)
// and one piece of their escaping.
func (r *Result) WriteJSON(w io.Writer) error {
	shell := *r
	shell.Stdout, shell.Stderr = "", ""
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&shell); err != nil {
		return err
	}
	skeleton := b.Bytes()
	for _, f := range []struct{ key, value string }{{"stdout", r.Stdout}, {"stderr", r.Stderr}} {
		// A quote inside a JSON string is always escaped, so the first
		// unescaped `"stdout":""` is the field itself.
		field := []byte(`"` + f.key + `":"`)
		i := bytes.Index(skeleton, append(field, '"'))
		if i < 0 {
			return fmt.Errorf("result JSON has no %s field", f.key)
		}
		head := i + len(field)
		if _, err := w.Write(skeleton[:head]); err != nil {
			return err
		}
		if err := writeJSONString(w, f.value); err != nil {
			return err
		}
		skeleton = skeleton[head:] // from the closing quote on
	}
	_, err := w.Write(skeleton)
	return err
}

// writeJSONString writes the escaped body of s (without quotes), split at
// places that decode the same whole or in pieces: never inside a UTF-8
// sequence that the next piece would complete.
func writeJSONString(w io.Writer, s string) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	for len(s) > 0 {
		n := min(len(s), jsonChunk)
		if n < len(s) {
			// Back off to the start of the last rune, unless that rune
			// is already complete (or not UTF-8 at all).
			for k := n - 1; k >= 0 && k > n-utf8.UTFMax; k-- {
				if utf8.RuneStart(s[k]) {
					if !utf8.FullRuneInString(s[k:n]) && utf8.FullRuneInString(s[k:]) {
						n = k
					}
					break
				}
			}
			if n == 0 {
				n = min(len(s), jsonChunk)
			}
		}
		b.Reset()
		if err := enc.Encode(s[:n]); err != nil {
			return err
		}
		// Encode wrote "...."\n: keep what is between the quotes.
		if _, err := w.Write(b.Bytes()[1 : b.Len()-2]); err != nil {
			return err
		}
		s = s[n:]
	}
	return nil
}
