package api

// RunRequest is the body of POST /v1/run. Exactly one of Code and Argv.
type RunRequest struct {
	Code    *string           `json:"code,omitempty"`    // Python source, run as __main__
	Argv    []string          `json:"argv,omitempty"`    // a command, looked up in the jail's PATH
	Stdin   string            `json:"stdin,omitempty"`   // the program's stdin
	Files   map[string]string `json:"files,omitempty"`   // name -> base64, written into /work first
	Profile string            `json:"profile,omitempty"` // one of the server's profiles; "" the first
	Limits  Limits            `json:"limits,omitempty"`  // each no looser than the profile's
}

// RunResponse is Result (the `stockade run --json` object) and what
// the server adds: files, images and how the pool served the request.
type RunResponse struct {
	Type string `json:"type,omitempty"` // "result" in a stream
	*Result
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

// Error is a request the server refuses: an HTTP status and the reason.
type Error struct {
	Status int    `json:"-"`
	Msg    string `json:"error"`
}

func (e *Error) Error() string { return e.Msg }

// Limits tighten a profile's: the keys of a profile's [limits] table
// ("memory", "timeout", "pids", ...), each value as a profile file writes
// it ("256M", "2s", 16). They are one more profile layer, laid over the
// server's profile by profiles.Tighten (nothing may be looser than the
// profile, which is the server's ceiling) and checked by the same
// Profile.Validate as a flag or a file.
type Limits map[string]any

// NDJSON is the media type of a streamed response.
const NDJSON = "application/x-ndjson"

// StreamLine is a line of a streamed answer (a request with Accept:
// NDJSON, to /v1/run or a session's exec) that carries output as it
// comes: Type is StreamStdout or StreamStderr, Data the text (a chunk
// never ends inside a UTF-8 character). The last line's type is
// StreamResult and it is the route's whole answer, a RunResponse or an
// ExecResult, with its Type set.
type StreamLine struct {
	Type string `json:"type"`
	Data string `json:"data"`
}

// The types of a stream's lines.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
	StreamResult = "result"
)
