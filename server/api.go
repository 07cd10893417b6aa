package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/stockade/stockade/jail"
)

// RunRequest is the body of POST /v1/run. Exactly one of Code and Argv.
type RunRequest struct {
	Code    *string           `json:"code,omitempty"`    // Python source, run as __main__
	Argv    []string          `json:"argv,omitempty"`    // a command, looked up in the jail's PATH
	Stdin   string            `json:"stdin,omitempty"`   // the program's stdin
	Files   map[string]string `json:"files,omitempty"`   // name -> base64, written into /work first
	Profile string            `json:"profile,omitempty"` // one of the server's profiles; "" the first
	Limits  Limits            `json:"limits,omitempty"`  // each no looser than the profile's

	inputs map[string]inputFile // Files' sizes and hashes, once validated
}

// RunResponse is jail.Result (the `stockade run --json` object) and what
// the server adds: files, images and how the pool served the request.
type RunResponse struct {
	Type string `json:"type,omitempty"` // "result" in a stream
	*jail.Result
	Files          FileMap     `json:"files"`           // created or changed in /work: name -> base64
	FilesTruncated bool        `json:"files_truncated"` // some were left out (size or count cap)
	FilesSkipped   SkippedList `json:"files_skipped"`   // and these, with the reason
	Images         []Image     `json:"images"`
	// Results are the program's rich results, as a session's exec has
	// them: each display() in order, then each figure left open that it
	// did not display (a script has no last expression to show).
	Results          []RichResult `json:"results"`
	ResultsTruncated bool         `json:"results_truncated"`
	Pool             PoolUse      `json:"pool"`
}

// Image is one figure left open at the end of the run.
type Image struct {
	Type string `json:"type"` // "png"
	Data string `json:"data"` // base64
}

// PoolUse says whether a prepared jail served the request, and what the
// request waited for when none was ready.
type PoolUse struct {
	Hit bool `json:"hit"`
	// WaitedMs is the time from the request's admission to its code
	// reaching a jail: near zero on a hit, a jail's whole set-up on a miss.
	WaitedMs float64 `json:"waited_ms"`
	Reason   string  `json:"reason,omitempty"` // why it missed
}

// apiError is a request the server refuses: an HTTP status and the reason.
type apiError struct {
	Status int    `json:"-"`
	Msg    string `json:"error"`
}

func (e *apiError) Error() string { return e.Msg }

func badRequest(format string, a ...any) *apiError {
	return &apiError{Status: 400, Msg: fmt.Sprintf(format, a...)}
}

// validate checks what the jail cannot: the shape of the request and its
// file names. Files are decoded as they stream, to check and hash them.
func (req *RunRequest) validate(maxFiles int) error {
	if (req.Code == nil) == (len(req.Argv) == 0) {
		return badRequest("give exactly one of \"code\" and \"argv\"")
	}
	for i, a := range req.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return badRequest("argv[%d]: contains NUL", i)
		}
	}
	if req.Argv != nil && req.Argv[0] == "" {
		return badRequest("argv[0]: empty")
	}
	if len(req.Files) > maxFiles {
		return badRequest("files: %d files, at most %d", len(req.Files), maxFiles)
	}
	req.inputs = make(map[string]inputFile, len(req.Files))
	for name, data := range req.Files {
		if err := checkFileName(name); err != nil {
			return err
		}
		in, err := digestBase64(data)
		if err != nil {
			return badRequest("files[%q]: not base64: %v", name, err)
		}
		req.inputs[name] = in
	}
	return nil
}

// checkFileName admits a plain name for a file directly in /work: no
// path separator, no "." or "..", no NUL, nothing the bootstrap would
// resolve outside /work or onto the server's own figure directory.
func checkFileName(name string) error {
	switch {
	case name == "", name == ".", name == "..":
		return badRequest("files: name %q is not a file name", name)
	case strings.ContainsAny(name, "/\x00"):
		return badRequest("files: name %q contains '/' or NUL (files go directly into /work)", name)
	case len(name) > 255:
		return badRequest("files: name %.20q...: longer than 255 bytes", name)
	case name == figureDir:
		return badRequest("files: name %q is reserved", name)
	}
	return nil
}

// marshal encodes v as the JSON encoder writes it (no HTML
// escaping: the output is for programs, and stdout may hold "<").
func marshal(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return b.Bytes()
}

// NDJSON is the media type of a streamed response.
const NDJSON = "application/x-ndjson"
