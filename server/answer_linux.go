package server

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/server/internal/kernel"
)

// driverAnswer is what the driver says of one exec. It is the jail's
// word: the server checks its shape and token, caps its sizes, and takes
// from it only what the cell itself could have said (its result, its
// exception, its figures).
type driverAnswer struct {
	// Started, alone in its frame, says the cell is about to run: a
	// KeyboardInterrupt sent before it would be dropped as late.
	Started string `json:"started,omitempty"`
	// Hello and Python are a restarted driver's first frame.
	Hello           string         `json:"hello,omitempty"`
	Python          string         `json:"python,omitempty"`
	Token           string         `json:"token"`
	Status          string         `json:"status"` // "ok" or "exception"
	Result          *string        `json:"result"`
	ResultTruncated bool           `json:"result_truncated"`
	Error           *api.ExecError `json:"error"`
	Images          answerImages   `json:"images"`
	ImagesTruncated bool           `json:"images_truncated"`
	// Results are the cell's rich results, each a MIME bundle: the
	// jail's bytes, held to richCaps as they are decoded, before anything
	// else sees them.
	Results          answerResults `json:"results"`
	ResultsTruncated bool          `json:"results_truncated"`
}

// maxImages caps the figures of one exec, whatever their size: a forged
// answer of a million empty strings would otherwise cost the server a
// slice, a string and an Image each (1.3 million: +330 MiB held).
const maxImages = 256

// answerCaps are what the server holds of one answer at most, whatever
// the answer says: the documented caps, enforced here rather than
// trusted to the driver, which shares its interpreter with the cells.
type answerCaps struct {
	resultChars int64 // result, error name, value and traceback, each, in characters
	imageBytes  int64 // PNG bytes (decoded) of all the figures
	images      int   // figures
	results     richCaps
}

// answerImages are an answer's figures, taken as they are decoded: each a
// PNG in base64, at most caps.images of them and caps.imageBytes of PNG
// in all. What is past a cap is never held (Cut says it was there).
type answerImages struct {
	caps answerCaps
	PNGs []string
	Cut  bool
}

// UnmarshalJSON reads the array element by element, within the caps.
// encoding/json has checked the whole value's syntax before calling it,
// so stopping at a cap leaves nothing unchecked.
func (a *answerImages) UnmarshalJSON(b []byte) error {
	a.PNGs, a.Cut = nil, false
	if string(b) == "null" {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('[') {
		return errors.New("images: want an array")
	}
	var total int64
	for n := 0; dec.More(); n++ {
		if n >= a.caps.images {
			a.Cut = true
			return nil
		}
		t, err := dec.Token()
		if err != nil {
			return fmt.Errorf("images: %w", err)
		}
		s, ok := t.(string)
		if !ok {
			return errors.New("images: want base64 strings")
		}
		if total+int64(base64.StdEncoding.DecodedLen(len(s))) > a.caps.imageBytes+2 {
			a.Cut = true
			return nil
		}
		png, err := base64.StdEncoding.DecodeString(s)
		if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
			continue // not a figure the driver saved; counted against the number all the same
		}
		if total += int64(len(png)); total > a.caps.imageBytes {
			a.Cut = true
			return nil
		}
		a.PNGs = append(a.PNGs, s)
	}
	return nil
}

// capTo cuts the answer's texts to the caps, in characters as the driver
// counts them, each cut copied so that the frame's bytes are not kept
// alive behind it, and says whether it cut anything the driver had not.
func (a *driverAnswer) capTo(caps answerCaps) {
	var cut bool
	if a.Result != nil {
		r, c := cutChars(*a.Result, caps.resultChars)
		a.Result, cut = &r, c
		a.ResultTruncated = a.ResultTruncated || cut
	}
	if e := a.Error; e != nil {
		var c1, c2, c3 bool
		e.Name, c1 = cutChars(e.Name, caps.resultChars)
		e.Value, c2 = cutChars(e.Value, caps.resultChars)
		e.Traceback, c3 = cutChars(e.Traceback, caps.resultChars)
		e.Truncated = e.Truncated || c1 || c2 || c3
	}
}

// cutChars keeps the first max characters of s (a copy when it cut).
func cutChars(s string, max int64) (string, bool) {
	if int64(len(s)) <= max {
		return s, false
	}
	var n int64
	for i := range s {
		if n == max {
			return strings.Clone(s[:i]), true
		}
		n++
	}
	return s, false
}

// boundResults is the driver's results as the server keeps them: at most
// caps.Count, each within caps.Bundle and all within caps.Bytes, each MIME
// name a plain type/subtype, each value a JSON string but for JSON types,
// base64 of the right kind of file for the binary types (binaryMagic),
// and text/plain in every one. A result that breaks a rule is dropped
// whole and the list marked truncated: an honest driver never sends one.
func boundResults(rs []api.RichResult, caps richCaps) ([]api.RichResult, bool) {
	b := resultsBound{caps: caps, out: []api.RichResult{}}
	for _, r := range rs {
		if b.full() {
			b.cut = true // rs[i] and any after
			break
		}
		b.take(r)
	}
	return b.out, b.cut
}

// resultsSeen is how many results, per result kept, the server looks at:
// an honest driver's are all kept, and a forged list of millions of
// dropped ones would otherwise cost a decode each.
const resultsSeen = 4

// resultsBound holds results within caps as they come, one at a time.
type resultsBound struct {
	caps  richCaps
	out   []api.RichResult
	total int64
	seen  int
	cut   bool
}

// full says that no more results are looked at: the next is cut unread.
func (b *resultsBound) full() bool {
	return len(b.out) >= b.caps.Count || b.seen >= resultsSeen*b.caps.Count
}

// take keeps r if it keeps the rules and fits in what is left.
func (b *resultsBound) take(r api.RichResult) {
	caps := b.caps
	b.seen++
	n, ok := bundleSize(r, caps.Bundle)
	if !ok || b.total+n > caps.Bytes {
		b.cut = true
		return
	}
	b.total += n
	b.out = append(b.out, r)
}

// answerResults are an answer's rich results, taken as they are decoded,
// as answerImages are: a list of millions of tiny bundles in a frame of
// megabytes would otherwise be a map, a slice and a header each before
// boundResults saw it (a 28 MiB frame: 2.5 million results, 250 MiB
// held). What is past a cap is never decoded (Cut says it was there).
type answerResults struct {
	caps richCaps
	List []api.RichResult
	Cut  bool
}

// bundleSlack is what a result's JSON may hold beyond its MIME names and
// values (its keys, flags and punctuation) before it is dropped unread.
const bundleSlack = 1024

// UnmarshalJSON reads the array element by element, within the caps.
// encoding/json has checked the whole value's syntax before calling it.
func (a *answerResults) UnmarshalJSON(b []byte) error {
	bound := resultsBound{caps: a.caps, out: []api.RichResult{}}
	a.List, a.Cut = bound.out, false
	if string(b) == "null" {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('[') {
		return errors.New("results: want an array")
	}
	for dec.More() {
		if bound.full() {
			bound.cut = true
			break
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return fmt.Errorf("results: %w", err)
		}
		r, ok := decodeBundle(raw, a.caps.Bundle)
		if !ok {
			bound.seen++
			bound.cut = true
			continue
		}
		bound.take(r)
	}
	a.List, a.Cut = bound.out, bound.cut
	return nil
}

// decodeBundle is one result from its JSON, or false when it cannot keep
// the rules: too big, too many types, a field RichResult has not. Its
// data is read key by key, so that a bundle of a million keys stops at
// the seventeenth.
func decodeBundle(raw []byte, max int64) (api.RichResult, bool) {
	var r api.RichResult
	if int64(len(raw)) > max+bundleSlack {
		return r, false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return r, false
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return r, false
		}
		switch k {
		case "data":
			if t, err := dec.Token(); err != nil || t != json.Delim('{') {
				return r, false
			}
			r.Data = map[string]json.RawMessage{}
			for dec.More() {
				mime, err := dec.Token()
				s, ok := mime.(string)
				if err != nil || !ok || len(r.Data) >= maxBundleTypes {
					return r, false
				}
				var v json.RawMessage
				if err := dec.Decode(&v); err != nil {
					return r, false
				}
				r.Data[s] = v
			}
			if _, err := dec.Token(); err != nil {
				return r, false
			}
		case "is_main_result":
			if dec.Decode(&r.IsMainResult) != nil {
				return r, false
			}
		case "truncated":
			if dec.Decode(&r.Truncated) != nil {
				return r, false
			}
		default:
			return r, false
		}
	}
	return r, true
}

// bundleSize is the bytes of r's MIME names and values, and whether r
// keeps the rules of boundResults within max bytes.
func bundleSize(r api.RichResult, max int64) (int64, bool) {
	if len(r.Data) > maxBundleTypes {
		return 0, false
	}
	var n int64
	for mime, raw := range r.Data {
		n += int64(len(mime) + len(raw))
		if n > max || !isMIMEType(mime) {
			return 0, false
		}
		if mime == "application/json" || strings.HasSuffix(mime, "+json") {
			continue // any JSON: the frame's decoder checked it
		}
		var v string
		if json.Unmarshal(raw, &v) != nil {
			return 0, false
		}
		if magic, ok := binaryMagic[mime]; ok {
			b, err := base64.StdEncoding.DecodeString(v)
			if err != nil || !bytes.HasPrefix(b, magic) {
				return 0, false
			}
		}
	}
	_, plain := r.Data["text/plain"]
	return n, plain
}

// binaryMagic are the first bytes of each binary type, which clients
// decode from base64 (the Python client's _BINARY) and show or save as
// they are: a value that is not base64 of its kind would fail there, or
// pass for a file it is not.
var binaryMagic = map[string][]byte{
	"image/png":       []byte("\x89PNG\r\n\x1a\n"),
	"image/jpeg":      {0xff, 0xd8, 0xff},
	"application/pdf": []byte("%PDF-"),
}

// isMIMEType admits type/subtype of lower-case letters, digits and . + -
// (RFC 6838's restricted names, as IPython's formatters use them): a
// name the jail chose is repeated to clients and MCP hosts as a key.
func isMIMEType(s string) bool {
	if len(s) > maxMIMETypeName {
		return false
	}
	slash := strings.IndexByte(s, '/')
	if slash <= 0 || slash == len(s)-1 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if i == slash {
			continue
		}
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '.' || c == '+' || c == '-') {
			return false
		}
	}
	return true
}

// answerBounds are the largest frame a driver may send and what the
// server holds of its answer: the figures (base64) and the result, error
// value and traceback (characters, JSON-escaped: 12 bytes for a character
// past U+FFFF at worst), the rich results (JSON bytes), and room for the
// rest. A run's answer and an exec's are held to the same.
func (s *Server) answerBounds(outputLimit int64) (int64, answerCaps) {
	maxFrame := s.cfg.FilesMax/3*4 + 4 + 3*12*resultMax(outputLimit) + richCapsOf(s.cfg.FilesMax, nil).Bytes + 1<<20
	return maxFrame, answerCaps{resultChars: resultMax(outputLimit), imageBytes: s.cfg.FilesMax, images: maxImages,
		results: richCapsOf(s.cfg.FilesMax, nil)}
}

// readAnswer reads one frame of an exec, held only within the caps.
func readAnswer(d *kernel.Conn, caps answerCaps, deadline time.Time) (driverAnswer, error) {
	a := driverAnswer{Images: answerImages{caps: caps}, Results: answerResults{caps: caps.results}}
	if err := d.ReadFrame(&a, deadline); err != nil {
		return driverAnswer{}, err
	}
	a.capTo(caps)
	return a, nil
}
