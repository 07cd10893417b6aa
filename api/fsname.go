package api

import (
	"bytes"
	"fmt"
	"sort"
	"unicode/utf8"
)

// A jail names its files with any bytes but '/' and NUL; JSON text is
// UTF-8, and encoding/json writes each byte that is not UTF-8 as U+FFFD,
// so the files \xfe and \xff came back under one key and one was lost.
// Names are written instead as Python's surrogateescape decodes them
// (PEP 383): each such byte b as the escape of U+DC00+b, \udcfe for \xfe.
// Such a lone surrogate stands for no character, so the key of a name
// that is not UTF-8 can never be that of one that is, nor of another;
// Python's json.loads then os.fsencode give the bytes back (a decoder
// that replaces lone surrogates, as Go's does, loses the distinction).

// FileMap is a response's files: a path below /work -> base64 of its bytes.
type FileMap map[string]string

// MarshalJSON writes the paths as surrogate escapes where they are not
// UTF-8, in sorted order as encoding/json does.
func (m FileMap) MarshalJSON() ([]byte, error) {
	if m == nil {
		return []byte("null"), nil
	}
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	var b bytes.Buffer
	b.WriteByte('{')
	for i, n := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(appendFSName(nil, n))
		b.WriteByte(':')
		b.Write(appendFSName(nil, m[n])) // base64: plain ASCII
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// SkippedList is files_skipped: "path: reason" lines, the paths written as
// FileMap writes them.
type SkippedList []string

// MarshalJSON writes each line as FileMap writes a path.
func (l SkippedList) MarshalJSON() ([]byte, error) { return FSNames(l).MarshalJSON() }

// FSName is a name or path in a jail's /work, written as FileMap writes
// its paths: a session's listing and files_changed, as /v1/run's files.
type FSName string

// MarshalJSON writes n with surrogate escapes where it is not UTF-8.
func (n FSName) MarshalJSON() ([]byte, error) { return appendFSName(nil, string(n)), nil }

// FSNames are paths in a jail's /work, each written as FSName writes one.
type FSNames []string

// MarshalJSON writes each path as FileMap writes a path.
func (l FSNames) MarshalJSON() ([]byte, error) {
	if l == nil {
		return []byte("null"), nil
	}
	b := []byte{'['}
	for i, s := range l {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendFSName(b, s)
	}
	return append(b, ']'), nil
}

// appendFSName appends s as a JSON string: UTF-8 as it is (quotes,
// backslashes and control characters escaped, as encoding/json does),
// each byte that is not UTF-8 as a surrogate escape.
func appendFSName(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = fmt.Appendf(b, `\udc%02x`, s[i])
		case r == '"' || r == '\\':
			b = append(b, '\\', byte(r))
		case r < 0x20 || r == '\u2028' || r == '\u2029':
			b = fmt.Appendf(b, `\u%04x`, r)
		default:
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}
