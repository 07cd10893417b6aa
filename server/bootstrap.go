package server

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/stockade/stockade/server/internal/kernel"
)

// bootstrap is the program every jail of the server runs with `python3 -I
// -c`. It starts with the jail and reads, blocking until a request comes,
// the job from stdin: a decimal length and a newline, then that many bytes
// of JSON, the header ({"code": N} or {"argv": [N, ...]}, and "files":
// [{"name", "size"}, ...]), then the code's or each argument's bytes and
// each file's bytes, raw, in that order. The bulk is never JSON: neither
// the server nor the jail holds a second, encoded copy of it, and the
// files stream to /work in chunks. Whatever follows on stdin is the job's
// own stdin: the bootstrap reads with os.read, unbuffered, and exactly the
// lengths the header gives, so not a byte of it is consumed. It writes the
// files into /work, then runs the code as __main__ (or execs argv), and at
// the end saves the matplotlib figures still open as PNGs in figureDir,
// where the server picks them up. A job that says "session" runs the
// session driver (driver.py, compiled with its modules imported before the
// bootstrap blocks) instead; any other job closes descriptor 3 first, the
// driver's channel, which every jail of the server is given so that any
// of them can become a session. The modules it needs are imported before
// it blocks, while the jail waits in the pool. matplotlib's font cache is
// the jail's own (package pydata, bound by every jail). It runs as the
// jail user, inside the jail: nothing it does is trusted.
const bootstrap = `import os, sys, json, linecache, traceback
def _stockade_chunks(n):
    while n > 0:
        c = os.read(0, min(n, 1 << 20))
        if not c:
            os._exit(0)
        n -= len(c)
        yield c
def _stockade_read(n):
    return b"".join(_stockade_chunks(n))
def _stockade_header():
    h = bytearray()
    while not h.endswith(b"\n"):
        c = os.read(0, 1)
        if not c:
            os._exit(0)
        h += c
    return _stockade_read(int(h))
_stockade_drv = {"__name__": "_stockade_driver", "__builtins__": __builtins__}
exec(compile(DRIVER, "<stockade driver>", "exec"), _stockade_drv)
del DRIVER
_job = json.loads(_stockade_header())
if "session" in _job:
    _stockade_drv["main"](_job["session"])
    os._exit(0)
try:
    os.close(3)
except OSError:
    pass
if "argv" in _job:
    _job["argv"] = [_stockade_read(n).decode("utf-8", "surrogateescape") for n in _job["argv"]]
else:
    _job["code"] = _stockade_read(_job["code"]).decode("utf-8", "surrogateescape")
for _file in _job.get("files") or ():
    with open(os.path.join("/work", _file["name"]), "wb") as _f:
        for _c in _stockade_chunks(_file["size"]):
            _f.write(_c)
if "argv" in _job:
    sys.stdout.flush()
    try:
        os.execvp(_job["argv"][0], _job["argv"])
    except OSError as e:
        print("stockade: %s: %s" % (_job["argv"][0], e.strerror), file=sys.stderr)
        os._exit(127 if isinstance(e, FileNotFoundError) else 126)
def _stockade_figures(results):
    # Each figure left open: a PNG in FIGDIR, and a rich result unless
    # the program displayed it; then the results, for the server.
    plt = sys.modules.get("matplotlib.pyplot")
    try:
        nums = plt.get_fignums() if plt is not None else []
        if nums or results.list or results.truncated:
            os.makedirs(FIGDIR, exist_ok=True)
        for i, n in enumerate(nums):
            fig = plt.figure(n)
            data = _stockade_drv["_figure_data"](fig, ["png"] + [f for f in results.caps["formats"] if f != "png"])
            with open(os.path.join(FIGDIR, "%03d.png" % i), "wb") as f:
                f.write(data["image/png"])
            if id(fig) not in results.shown:
                results.add(fig, raw=data)
    except Exception as e:
        print("stockade: saving figures: %r" % e, file=sys.stderr)
    if results.list or results.truncated:
        with open(os.path.join(FIGDIR, "results.json"), "w") as f:
            json.dump({"results": results.list, "truncated": results.truncated}, f)
def _stockade_main(code):
    linecache.cache["<code>"] = (len(code), None, code.splitlines(True), "<code>")
    g = {"__name__": "__main__", "__builtins__": __builtins__}
    # display() adds rich results, as in a session's cell.
    results = _stockade_drv["_state"]["results"] = _stockade_drv["_Results"](_job["rich"], _job["result_max"])
    import builtins
    builtins.display = _stockade_drv["_display"]
    sys.meta_path.insert(0, _stockade_drv["_IPythonDisplay"])
    status = 0
    try:
        exec(compile(code, "<code>", "exec"), g)
    except SystemExit as e:
        status = e.code
    except BaseException as e:
        traceback.print_exception(type(e), e, e.__traceback__.tb_next)
        status = 1
    _stockade_figures(results)
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
	return []string{"python3", "-I", "-u", "-c", "FIGDIR = " + fmt.Sprintf("%q", "/work/"+figureDir) + "\n" +
		"DRIVER = " + pyString(kernel.Source) + "\n" + bootstrap}
}

// pyString quotes ASCII text as a Python string literal (Go's %q of it is
// one: \n, \t, \", \\ and \xNN mean the same in both).
func pyString(s string) string { return fmt.Sprintf("%q", s) }

// jobHeader is the JSON that leads the job: the lengths of what follows.
type jobHeader struct {
	Code  *int      `json:"code,omitempty"` // bytes of code
	Argv  []int     `json:"argv,omitempty"` // bytes of each argument
	Files []jobFile `json:"files,omitempty"`
	// Rich and ResultMax bound the code's rich results (a session's
	// exec request carries the same).
	Rich      *richCaps `json:"rich,omitempty"`
	ResultMax int64     `json:"result_max,omitempty"`
}

type jobFile struct {
	Name string `json:"name"`
	Size int64  `json:"size"` // decoded
}

// sessionJob turns a pooled jail's bootstrap into a session's driver.
type sessionJob struct {
	Hello string            `json:"hello"` // echoed in the first frame
	Env   map[string]string `json:"env,omitempty"`
}

// frame is one length-prefixed JSON frame the bootstrap reads.
func frame(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append([]byte(fmt.Sprintf("%d\n", len(b))), b...), nil
}

// writeJob writes the job of a validated request to w (the jail's stdin),
// the bulk straight from the request's strings: the code and arguments as
// they are, the files decoded from base64 as they stream.
func writeJob(w io.Writer, req *RunRequest, rich richCaps, resultMax int64) error {
	var h jobHeader
	if req.Code != nil {
		n := len(*req.Code)
		h.Code = &n
		h.Rich, h.ResultMax = &rich, resultMax
	}
	for _, a := range req.Argv {
		h.Argv = append(h.Argv, len(a))
	}
	names := make([]string, 0, len(req.Files))
	for name := range req.Files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		h.Files = append(h.Files, jobFile{Name: name, Size: req.inputs[name].size})
	}
	hdr, err := frame(h)
	if err != nil {
		return err
	}
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	if req.Code != nil {
		if _, err := io.WriteString(w, *req.Code); err != nil {
			return err
		}
	}
	for _, a := range req.Argv {
		if _, err := io.WriteString(w, a); err != nil {
			return err
		}
	}
	for _, f := range h.Files {
		n, err := io.Copy(w, base64.NewDecoder(base64.StdEncoding, strings.NewReader(req.Files[f.Name])))
		if err != nil {
			return err
		}
		if n != f.Size {
			return fmt.Errorf("file %q: %d bytes, %d when validated", f.Name, n, f.Size)
		}
	}
	return nil
}
