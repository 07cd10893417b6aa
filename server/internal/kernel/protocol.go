package kernel

import (
	"fmt"
)

// The frames the server sends the driver, each the JSON of one frame:
// the jail's one job (Run or Session), then a session's Requests (exec,
// restart). The driver's answers to a session are read by the server into
// its own type, held to its caps as they are decoded (server's
// driverAnswer); a run answers in files (Run.FigureDir).

// Args is every server jail's command line: the driver compiled under
// its own file name (its frames are left out of the cells' tracebacks by
// it), in isolated mode (no user site, no PYTHON* variables, no script
// directory on sys.path) and unbuffered, so a streamed response carries
// output as it is written. The driver imports its modules and waits on its
// channel for the job while the jail waits in the pool.
func Args() []string {
	return []string{"python3", "-I", "-u", "-c",
		"exec(compile(" + pyString(Source) + ", \"<stockade driver>\", \"exec\"), " +
			"{\"__name__\": \"_stockade_driver\", \"__builtins__\": __builtins__})"}
}

// pyString quotes ASCII text as a Python string literal (Go's %q of it is
// one: \n, \t, \", \\ and \xNN mean the same in both).
func pyString(s string) string { return fmt.Sprintf("%q", s) }

// RichCaps bound a run's or an exec's rich results: the driver keeps to
// them, and the server holds its answer to them again, since the driver
// runs in the program's interpreter and the program can say anything in
// its name. Sizes are bytes of JSON, as the answer's frame carries them.
type RichCaps struct {
	Count   int      `json:"count"`   // results per exec
	Bundle  int64    `json:"bundle"`  // bytes of one result's MIME values and their names
	Bytes   int64    `json:"bytes"`   // bytes of all an exec's results
	Formats []string `json:"formats"` // the figures' formats: "png", "svg"
}

// Run is a single-use run's job. Its bulk follows the frame on the
// channel, raw: the code's bytes or each argument's, then each file's, in
// that order and exactly the lengths given (SendRun writes both).
type Run struct {
	Op    string    `json:"op"`             // "run"
	Code  *int      `json:"code,omitempty"` // bytes of code
	Argv  []int     `json:"argv,omitempty"` // bytes of each argument
	Files []RunFile `json:"files,omitempty"`
	// ResultMax and Rich bound the rich results the code leaves (an
	// exec's request carries the same).
	ResultMax int64    `json:"result_max,omitempty"`
	Rich      RichCaps `json:"rich"`
	// FigureDir is where in the jail the driver leaves the figures still
	// open at the end (NNN.png) and the rich results (results.json): the
	// program holds no channel then, only /work, which the server reads.
	FigureDir string `json:"figure_dir"`
}

// RunFile is one file of a run, written to /work before the code runs.
type RunFile struct {
	Name string `json:"name"`
	Size int64  `json:"size"` // decoded
}

// Session turns a pooled jail's driver into a session's: its first frame
// back is a Hello that carries Hello.
type Session struct {
	Op    string            `json:"op"` // "session"
	Hello string            `json:"hello"`
	Env   map[string]string `json:"env,omitempty"`
}

// Request is one of a session's requests: an exec, sent with the cell's
// stdin, stdout and stderr pipes as SCM_RIGHTS, or a restart.
type Request struct {
	Op        string   `json:"op"`    // "exec" or "restart"
	Token     string   `json:"token"` // the answer must carry it
	Code      string   `json:"code"`
	N         int      `json:"n"`          // the execution count: the cell's file name
	ResultMax int64    `json:"result_max"` // bytes of result, error value and traceback each
	ImagesMax int64    `json:"images_max"` // bytes of PNG in all
	Rich      RichCaps `json:"rich"`       // the rich results' caps and the figures' formats
	// Env is set for the cell and put back after it (exec); Hello and
	// SessionEnv are a restart's: the fresh driver's first frame carries
	// Hello, and its environment is the jail's with SessionEnv added.
	Env        map[string]string `json:"env,omitempty"`
	Hello      string            `json:"hello,omitempty"`
	SessionEnv map[string]string `json:"session_env,omitempty"`
}

// Hello is a session driver's first frame.
type Hello struct {
	Hello  string `json:"hello"`
	Python string `json:"python"`
}
