package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/internal/httpbody"
)

// What a request body costs the server, outside any jail's cgroup. It was
// read into a json.Decoder's buffer, which doubles as it fills (up to twice
// the body, and as much again in the buffers it outgrew), decoded into
// strings, its files' base64 decoded once more to check them, and the job
// marshalled again (and copied once more behind its length) for the jail:
// 72 bodies of 16 MiB at once took the server to 1.7-4.5 GiB. Now a body
// is read once into a slice of its exact length, decoded from it into the
// request's strings (the slice is then garbage), checked and hashed as it
// streams, and fed to the jail from those strings as raw bytes: about
// twice its size at the peak, once while it waits to run. bodyBudget
// bounds how many such bodies the server holds at once.

// bodyBudget is the bytes of request bodies the server holds at once:
// being read, waiting for a run slot or running. A body's share is taken
// before it is read (its Content-Length, or --max-body when it has none)
// and given back when its request ends, so the server's memory for bodies
// is bounded by the budget, whatever the number of callers and their
// sizes; a request that does not fit waits, as a queued one does, and is
// then refused with 503.
type bodyBudget struct {
	mu    sync.Mutex
	max   int64
	used  int64
	freed chan struct{} // closed (and replaced) when a share is given back
}

func newBodyBudget(max int64) *bodyBudget {
	return &bodyBudget{max: max, freed: make(chan struct{})}
}

// errBodyBudget is a body that did not fit in the budget in time.
var errBodyBudget = errors.New("the request body budget is spent")

// take waits up to wait for n bytes of the budget.
func (b *bodyBudget) take(ctx context.Context, n int64, wait time.Duration) error {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		b.mu.Lock()
		if b.used+n <= b.max {
			b.used += n
			b.mu.Unlock()
			return nil
		}
		freed := b.freed
		b.mu.Unlock()
		select {
		case <-freed:
		case <-deadline.C:
			return errBodyBudget
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

func (b *bodyBudget) give(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	close(b.freed)
	b.freed = make(chan struct{})
}

func (b *bodyBudget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// bodyError is readBody's error as the server answers it: 413 over
// --max-body, 400 for a body that ended early or failed, and the
// deadline's error as it is (bodyRefusal's 408).
func bodyError(err error, length, max int64) error {
	if errors.Is(err, httpbody.ErrTooLarge) {
		return &api.Error{Status: 413, Msg: fmt.Sprintf("request body larger than %d bytes (--max-body)", max)}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("read body: %w", err) // the body's deadline: 408
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return badRequest("request body ended before its Content-Length of %d bytes", length)
	}
	return badRequest("read body: %v", err)
}

// rawSpan keeps where a JSON value lies in the body, without copying it
// (json.Unmarshal hands an Unmarshaler a slice of its input).
type rawSpan []byte

func (s *rawSpan) UnmarshalJSON(b []byte) error {
	*s = b
	return nil
}

// runFields are the names a request may use, as json.Unmarshal matches
// them to RunRequest's fields.
var runFields = []string{"code", "argv", "stdin", "files", "profile", "limits"}

// maxLimitsBytes bounds the limits object, a few short values, which is
// decoded into Go values (a long array there would cost many times its
// size) before Limits.layer says which keys are limits.
const maxLimitsBytes = 16 << 10

// unknownField names a key of the JSON object obj that is none of known,
// or "". The values are not copied: a file of megabytes is only scanned.
func unknownField(obj []byte, known []string) (string, map[string]rawSpan, error) {
	var keys map[string]rawSpan
	if err := json.Unmarshal(obj, &keys); err != nil {
		return "", nil, err
	}
next:
	for k := range keys {
		for _, f := range known {
			// As json.Unmarshal matches a key to a field.
			if strings.EqualFold(k, f) {
				continue next
			}
		}
		return k, keys, nil
	}
	return "", keys, nil
}

// wireRequest is RunRequest as it is decoded: the fields that can be
// megabytes are spans of the body, turned into strings in place by
// decodeRequest.
type wireRequest struct {
	Code    rawSpan            `json:"code"`
	Argv    []rawSpan          `json:"argv"`
	Stdin   rawSpan            `json:"stdin"`
	Files   map[string]rawSpan `json:"files"`
	Profile string             `json:"profile"`
	Limits  rawSpan            `json:"limits"`
}

// decodeRequest decodes one JSON object, and nothing after it, from body;
// unknown fields and wrong types are errors that name the field. It takes
// body over: the request's code, arguments, stdin and files are strings
// that share its memory, unescaped in place (a JSON string is never
// shorter than its value), so a body costs its own size once decoded and
// never twice. body must not be written after.
func decodeRequest(body []byte) (*api.RunRequest, error) {
	// A body that is no object at all gets json.Unmarshal's own error
	// below, which says what it is instead. Unknown limits are
	// Limits.layer's to name.
	if field, _, err := unknownField(body, runFields); err == nil && field != "" {
		return nil, badRequest("unknown field %q", field)
	}
	var wire wireRequest
	if err := json.Unmarshal(body, &wire); err != nil {
		// The error in RunRequest's terms (its types, not the spans').
		var req api.RunRequest
		if rerr := json.Unmarshal(body, &req); rerr != nil {
			return nil, typeError(rerr)
		}
		return nil, typeError(err)
	}
	// Every span is checked before any is unescaped: past this point the
	// body is no longer JSON.
	spans := map[string]rawSpan{"code": wire.Code, "stdin": wire.Stdin}
	for i, a := range wire.Argv {
		spans[fmt.Sprintf("argv[%d]", i)] = a
	}
	for name, f := range wire.Files {
		spans[fmt.Sprintf("files[%q]", name)] = f
	}
	for field, sp := range spans {
		if len(sp) > 0 && sp[0] != '"' && string(sp) != "null" {
			return nil, badRequest("field %q: want a string, got JSON %.20s", field, sp)
		}
	}
	req := &api.RunRequest{Profile: wire.Profile}
	if len(wire.Limits) > maxLimitsBytes {
		return nil, badRequest("limits: %d bytes of JSON; a request's limits are a few short values (at most %d bytes)", len(wire.Limits), maxLimitsBytes)
	}
	if len(wire.Limits) > 0 {
		// A limit's number is kept as written, for the profile decoder to
		// take as an integer or a float, as it would from a file.
		dec := json.NewDecoder(bytes.NewReader(wire.Limits))
		dec.UseNumber()
		if err := dec.Decode(&req.Limits); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) {
				te.Field = strings.TrimSuffix("limits."+te.Field, ".")
			}
			return nil, typeError(err)
		}
	}
	req.Stdin = spanString(wire.Stdin)
	if wire.Code != nil && string(wire.Code) != "null" {
		c := spanString(wire.Code)
		req.Code = &c
	}
	for _, a := range wire.Argv {
		req.Argv = append(req.Argv, spanString(a))
	}
	if wire.Files != nil {
		req.Files = make(map[string]string, len(wire.Files))
		for name, f := range wire.Files {
			req.Files[name] = spanString(f)
		}
	}
	return req, nil
}

func typeError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return badRequest("field %q: want %s, got JSON %s", te.Field, te.Type, te.Value)
	}
	return badRequest("malformed JSON: %v", err)
}

// spanString is the value of the JSON string (or null) sp, which the
// scanner has checked, unescaped in place: it shares sp's memory. Invalid
// UTF-8, which json.Unmarshal turns into U+FFFD (three bytes for one),
// could outgrow the span, and is decoded into a copy instead.
func spanString(sp rawSpan) string {
	if len(sp) < 2 || sp[0] != '"' {
		return "" // absent, or null
	}
	if bytes.IndexByte(sp, '\\') < 0 && utf8.Valid(sp) {
		return unsafe.String(&sp[1], len(sp)-2)
	}
	if !utf8.Valid(sp) {
		var s string
		_ = json.Unmarshal(sp, &s)
		return s
	}
	n := unquoteInPlace(sp)
	if n == 0 {
		return ""
	}
	return unsafe.String(&sp[0], n)
}

// unquoteInPlace writes the value of the quoted JSON string q, valid UTF-8
// that the JSON scanner accepted, over q from its start, as json.Unmarshal
// decodes it (an unpaired surrogate escape is U+FFFD), and returns its
// length. Each escape is at least as long as what it stands for, and the
// quote is dropped, so the write never overtakes the read.
func unquoteInPlace(q []byte) int {
	w := 0
	for r := 1; r < len(q)-1; {
		c := q[r]
		if c != '\\' {
			q[w] = c
			w++
			r++
			continue
		}
		switch e := q[r+1]; e {
		case 'u':
			rr := hex4(q[r+2 : r+6])
			r += 6
			if utf16.IsSurrogate(rr) {
				if r+6 <= len(q)-1 && q[r] == '\\' && q[r+1] == 'u' {
					if dec := utf16.DecodeRune(rr, hex4(q[r+2:r+6])); dec != unicode.ReplacementChar {
						w += utf8.EncodeRune(q[w:], dec)
						r += 6
						continue
					}
				}
				rr = unicode.ReplacementChar
			}
			w += utf8.EncodeRune(q[w:], rr)
		default:
			q[w] = unescape(e)
			w++
			r += 2
		}
	}
	return w
}

// unescape is what the two-character escape \e stands for.
func unescape(e byte) byte {
	switch e {
	case 'b':
		return '\b'
	case 'f':
		return '\f'
	case 'n':
		return '\n'
	case 'r':
		return '\r'
	case 't':
		return '\t'
	}
	return e // '"', '\\' and '/' stand for themselves
}

// hex4 is the value of four hex digits the scanner checked.
func hex4(h []byte) rune {
	var r rune
	for _, c := range h {
		switch {
		case c <= '9':
			c -= '0'
		case c >= 'a':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// inputFile is what the server keeps of a file the request put in /work:
// its size, for the driver's run job, and its hash, to tell whether the
// run changed it, instead of a second decoded copy of its bytes.
type inputFile struct {
	size int64
	sum  [sha256.Size]byte
}

// digestBase64 checks that data is base64 and hashes what it decodes to,
// as it streams: the decoded file is never held.
func digestBase64(data string) (inputFile, error) {
	h := sha256.New()
	n, err := io.Copy(h, base64.NewDecoder(base64.StdEncoding, strings.NewReader(data)))
	if err != nil {
		return inputFile{}, err
	}
	in := inputFile{size: n}
	h.Sum(in.sum[:0])
	return in, nil
}
