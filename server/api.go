package server

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/profiles"
)

// RunRequest is the body of POST /v1/run. Exactly one of Code and Argv.
type RunRequest struct {
	Code    *string           `json:"code,omitempty"`    // Python source, run as __main__
	Argv    []string          `json:"argv,omitempty"`    // a command, looked up in the jail's PATH
	Stdin   string            `json:"stdin,omitempty"`   // the program's stdin
	Files   map[string]string `json:"files,omitempty"`   // name -> base64, written into /work first
	Profile string            `json:"profile,omitempty"` // one of the server's profiles; "" the first
	Limits  *Limits           `json:"limits,omitempty"`  // each no looser than the profile's
}

// Limits tighten a profile's, in the profile file's syntax ("2s", "256M").
type Limits struct {
	Timeout     string   `json:"timeout,omitempty"`
	CPUTime     string   `json:"cpu_time,omitempty"`
	Memory      string   `json:"memory,omitempty"`
	CPUs        *float64 `json:"cpus,omitempty"`
	Pids        *int64   `json:"pids,omitempty"`
	OutputLimit string   `json:"output_limit,omitempty"`
}

// RunResponse is jail.Result (the `stockade run --json` object) and what
// the server adds: files, images and how the pool served the request.
type RunResponse struct {
	Type string `json:"type,omitempty"` // "result" in a stream
	*jail.Result
	Files          map[string]string `json:"files"`           // created or changed in /work: name -> base64
	FilesTruncated bool              `json:"files_truncated"` // some were left out (size or count cap)
	FilesSkipped   []string          `json:"files_skipped"`   // and these, with the reason
	Images         []Image           `json:"images"`
	Pool           PoolUse           `json:"pool"`
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

// decodeRequest reads one JSON object and nothing after it; unknown fields
// and wrong types are errors that name the field.
func decodeRequest(r io.Reader) (*RunRequest, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var req RunRequest
	if err := dec.Decode(&req); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, fmt.Errorf("read body: %w", err) // the body's deadline: 408
		}
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, &apiError{Status: 413, Msg: fmt.Sprintf("request body larger than %d bytes", tooBig.Limit)}
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, badRequest("field %q: want %s, got JSON %s", te.Field, te.Type, te.Value)
		}
		return nil, badRequest("malformed JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, &apiError{Status: 413, Msg: fmt.Sprintf("request body larger than %d bytes", tooBig.Limit)}
		}
		return nil, badRequest("malformed JSON: data after the object")
	}
	return &req, nil
}

// validate checks what the jail cannot: the shape of the request and its
// file names. Files are decoded to check them; the bootstrap decodes again.
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
	for name, data := range req.Files {
		if err := checkFileName(name); err != nil {
			return err
		}
		if _, err := base64.StdEncoding.DecodeString(data); err != nil {
			return badRequest("files[%q]: not base64: %v", name, err)
		}
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

// applyLimits tightens spec by the request's limits, refusing any that is
// looser than the profile's (the server's ceiling). It reports whether a
// limit needs a jail made for it (cgroup limits are fixed at set-up), as
// opposed to one a prepared jail can take at Start (the timeout).
func applyLimits(spec *jail.Spec, l *Limits) (cold bool, err error) {
	if l == nil {
		return false, nil
	}
	dur := func(field, v string, ceiling time.Duration, dst *time.Duration, zeroIsNone bool) error {
		if v == "" {
			return nil
		}
		d, err := profiles.ParseDuration(v)
		if err != nil {
			return badRequest("limits.%s: %v", field, err)
		}
		if d <= 0 {
			return badRequest("limits.%s: %q must be positive", field, v)
		}
		if ceiling > 0 && d > ceiling || ceiling == 0 && !zeroIsNone {
			return &apiError{Status: 422, Msg: fmt.Sprintf("limits.%s: %v is above the server's ceiling of %v", field, d, ceiling)}
		}
		*dst = d
		return nil
	}
	size := func(field, v string, ceiling int64, dst *int64) error {
		if v == "" {
			return nil
		}
		n, err := profiles.ParseSize(v)
		if err != nil {
			return badRequest("limits.%s: %v", field, err)
		}
		if n <= 0 {
			return badRequest("limits.%s: %q must be positive", field, v)
		}
		if n > ceiling {
			return &apiError{Status: 422, Msg: fmt.Sprintf("limits.%s: %d bytes is above the server's ceiling of %d", field, n, ceiling)}
		}
		*dst = n
		return nil
	}
	if err := dur("timeout", l.Timeout, spec.Timeout, &spec.Timeout, false); err != nil {
		return false, err
	}
	// A CPU-time limit where the profile has none is a tightening.
	before := *spec
	if err := dur("cpu_time", l.CPUTime, spec.Cgroup.CPUTime, &spec.Cgroup.CPUTime, true); err != nil {
		return false, err
	}
	if err := size("memory", l.Memory, spec.Cgroup.MemoryMax, &spec.Cgroup.MemoryMax); err != nil {
		return false, err
	}
	if err := size("output_limit", l.OutputLimit, spec.OutputLimit, &spec.OutputLimit); err != nil {
		return false, err
	}
	if c := l.CPUs; c != nil {
		if *c <= 0 {
			return false, badRequest("limits.cpus: %v must be positive", *c)
		}
		if *c > spec.Cgroup.CPUs {
			return false, &apiError{Status: 422, Msg: fmt.Sprintf("limits.cpus: %v is above the server's ceiling of %v", *c, spec.Cgroup.CPUs)}
		}
		spec.Cgroup.CPUs = *c
	}
	if p := l.Pids; p != nil {
		if *p <= 0 {
			return false, badRequest("limits.pids: %d must be positive", *p)
		}
		if *p > spec.Cgroup.PidsMax {
			return false, &apiError{Status: 422, Msg: fmt.Sprintf("limits.pids: %d is above the server's ceiling of %d", *p, spec.Cgroup.PidsMax)}
		}
		spec.Cgroup.PidsMax = *p
	}
	after := *spec
	after.Timeout = before.Timeout
	cold = !sameLimits(before, after)
	return cold, nil
}

func sameLimits(a, b jail.Spec) bool {
	return a.Cgroup == b.Cgroup && a.OutputLimit == b.OutputLimit
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
