package server

import (
	"encoding/json"
	"fmt"
)

// bootstrap is the program every jail of the server runs with `python3 -I
// -c`. It starts with the jail and reads, blocking until a request comes,
// one frame from stdin: a decimal length and a newline, then that many
// bytes of JSON, the job ({"code"} or {"argv"}, and "files"). Whatever
// follows on stdin is the job's own stdin: the bootstrap reads the header
// with os.read, unbuffered, so not a byte of it is consumed. It writes the
// files into /work, then runs the code as __main__ (or execs argv), and at
// the end saves the matplotlib figures still open as PNGs in figureDir,
// where the server picks them up. The modules it needs are imported before
// it blocks, while the jail waits in the pool. matplotlib's font cache is
// the jail's own (package mplcache, bound by every jail). It runs as the
// jail user, inside the jail: nothing it does is trusted.
const bootstrap = `import os, sys, json, base64, linecache, traceback
def _stockade_read(n):
    b = bytearray()
    while len(b) < n:
        c = os.read(0, n - len(b))
        if not c:
            break
        b += c
    return bytes(b)
def _stockade_header():
    h = bytearray()
    while not h.endswith(b"\n"):
        c = os.read(0, 1)
        if not c:
            os._exit(0)
        h += c
    return _stockade_read(int(h))
_job = json.loads(_stockade_header())
for _n, _d in (_job.get("files") or {}).items():
    with open(os.path.join("/work", _n), "wb") as _f:
        _f.write(base64.b64decode(_d))
if "argv" in _job:
    sys.stdout.flush()
    try:
        os.execvp(_job["argv"][0], _job["argv"])
    except OSError as e:
        print("stockade: %s: %s" % (_job["argv"][0], e.strerror), file=sys.stderr)
        os._exit(127 if isinstance(e, FileNotFoundError) else 126)
def _stockade_figures():
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    try:
        nums = plt.get_fignums()
        if nums:
            os.makedirs(FIGDIR, exist_ok=True)
        for i, n in enumerate(nums):
            plt.figure(n).savefig(os.path.join(FIGDIR, "%03d.png" % i), format="png")
    except Exception as e:
        print("stockade: saving figures: %r" % e, file=sys.stderr)
def _stockade_main(code):
    linecache.cache["<code>"] = (len(code), None, code.splitlines(True), "<code>")
    g = {"__name__": "__main__", "__builtins__": __builtins__}
    status = 0
    try:
        exec(compile(code, "<code>", "exec"), g)
    except SystemExit as e:
        status = e.code
    except BaseException as e:
        traceback.print_exception(type(e), e, e.__traceback__.tb_next)
        status = 1
    _stockade_figures()
    _stockade_exit(status)
def _stockade_exit(status):
    # What the interpreter's own exit does that a program can see (atexit,
    # non-daemon threads, flushed streams), then os._exit: the module
    # teardown and collection that follow would only delay the result.
    if status is None:
        status = 0
    elif not isinstance(status, int):
        print(status, file=sys.stderr)
        status = 1
    try:
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()
        import atexit
        atexit._run_exitfuncs()
    except BaseException:
        traceback.print_exc()
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:
            pass
    os._exit(status & 0xff)
_stockade_main(_job["code"])
`

// figureDir is where the bootstrap leaves figures, inside /work; the
// server returns them as images and leaves the directory out of files.
const figureDir = ".stockade-figures"

// bootstrapArgs is the jail's command line: isolated mode (no user site,
// no PYTHON* variables, no script directory on sys.path) and unbuffered,
// so a streamed response carries output as it is written.
func bootstrapArgs() []string {
	return []string{"python3", "-I", "-u", "-c", "FIGDIR = " + fmt.Sprintf("%q", "/work/"+figureDir) + "\n" + bootstrap}
}

// job is the bootstrap's header.
type job struct {
	Code  *string           `json:"code,omitempty"`
	Argv  []string          `json:"argv,omitempty"`
	Files map[string]string `json:"files,omitempty"` // base64, as the request had them
}

// frame is one length-prefixed JSON frame the bootstrap reads.
func frame(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append([]byte(fmt.Sprintf("%d\n", len(b))), b...), nil
}

// encodeJob is the bytes the bootstrap reads before the job's own stdin.
func encodeJob(j job) ([]byte, error) { return frame(j) }
