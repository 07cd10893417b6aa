# The driver: what every jail of the server runs, the one protocol
# between the server and the interpreter. It is in the stockade binary and
# reaches the jail in its command line (kernel.Args), which compiles it;
# its modules are imported while the jail waits in the pool, and it blocks
# on its channel until the server sends the jail's one job: "run" (a
# single-use run: the program, its files, its figures and rich results
# back) or "session" (the loop of execs below).
#
# It talks to the server on descriptor 3 alone, a unix stream socket the
# jail's init passed on purpose: frames of a decimal length, a newline
# and that many bytes of JSON. A run's frame is followed on the channel by
# its bulk, raw (the code or each argument, then each file), so that no
# second, encoded copy of it is held on either side; the run's stdin is
# the jail's, untouched. A run's program holds descriptors 0 to 2 alone,
# as any jail's: the channel is closed before it runs, and its figures and
# rich results are left in a directory of /work that the server reads as
# it reads /work (figure_dir). An exec request carries three descriptors
# (SCM_RIGHTS): the cell's stdin, stdout and stderr pipes, which become
# 0, 1 and 2 for the cell and are put back to /dev/null and the jail's
# own streams after it, so what the cell prints can never be read as a
# frame. Each frame of an exec carries the request's token: {"started"}
# when the cell is about to run (the server interrupts it only from
# then), then the answer.
#
# It runs as the jail user, inside the jail, in the same interpreter as
# the cells: nothing it says is trusted beyond what the cell could say
# about itself. The server measures the rest (time, CPU, memory, blocked
# calls, network, files) and decides the verdict.
import ast, base64, builtins, io, json, linecache, os, re, signal, socket, sys, traceback, types

CHAN = 3
# The exit status of a driver whose channel failed: the server closes it
# only after the jail is dead, so this is the cell's doing, and the server
# tells it from the interpreter's own death.
LOST = 86
DRIVER_FILE = "<stockade driver>"  # the name kernel.Args compiles this under
_state = {"user": False, "results": None}
# A restarted driver's job, which the old one put in its environment
# (_restart): taken out before anything else sees the environment.
_RESTART_ENV = "STOCKADE_DRIVER_RESTART"
_RESTART_JOB = os.environ.pop(_RESTART_ENV, None)
# The jail's environment as the driver found it, before the session's
# env: what a restarted driver starts from.
_BASE_ENV = dict(os.environ)


def _on_sigint(signum, frame):
    # The server's KeyboardInterrupt is for the cell. Outside it (reading
    # the next request, answering) it would break the driver: dropped.
    if _state["user"]:
        raise KeyboardInterrupt


class _Chan:
    def __init__(self, fd):
        self.sock = socket.socket(fileno=fd)
        os.set_inheritable(fd, False)
        self.buf = bytearray()
        self.fds = []

    def _fill(self):
        data, anc, flags, _ = self.sock.recvmsg(1 << 16, socket.CMSG_SPACE(16 * 4))
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                n = len(payload) - len(payload) % 4
                self.fds.extend(int.from_bytes(payload[i:i + 4], sys.byteorder) for i in range(0, n, 4))
        if flags & socket.MSG_CTRUNC:
            raise EOFError("descriptors lost (MSG_CTRUNC)")
        if not data:
            raise EOFError("the server closed the channel")
        self.buf += data

    def chunks(self, n):
        # n bytes of a run's bulk, as they come: what the frame left in
        # the buffer, then the socket's.
        while n > 0:
            if not self.buf:
                self._fill()
            c = bytes(self.buf[:min(n, 1 << 20)])
            del self.buf[:len(c)]
            n -= len(c)
            yield c

    def read(self, n):
        return b"".join(self.chunks(n))

    def recv(self):
        while b"\n" not in self.buf:
            if len(self.buf) > 24:
                raise EOFError("bad frame header")
            self._fill()
        head, _, rest = bytes(self.buf).partition(b"\n")
        n = int(head)
        self.buf = bytearray(rest)
        while len(self.buf) < n:
            self._fill()
        body, self.buf = bytes(self.buf[:n]), self.buf[n:]
        fds, self.fds = self.fds, []
        return json.loads(body), fds

    def send(self, obj):
        body = json.dumps(obj).encode()
        # A late KeyboardInterrupt must not cut a frame in half.
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            self.sock.sendall(b"%d\n" % len(body) + body)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _cut(s, limit):
    if s is None:
        return None, False
    if len(s) > limit:
        return s[:limit], True
    return s, False


def _cells_only(te, seen):
    # The cell's frames only: the driver's own (it runs the cell, its
    # SIGINT handler raises the KeyboardInterrupt) are not the caller's
    # code. Every exception of the chain.
    if te is None or id(te) in seen:
        return
    seen.add(id(te))
    te.stack = traceback.StackSummary.from_list([f for f in te.stack if f.filename != DRIVER_FILE])
    _cells_only(te.__cause__, seen)
    _cells_only(te.__context__, seen)
    for sub in getattr(te, "exceptions", None) or ():
        _cells_only(sub, seen)


def _error(e, limit):
    try:
        te = traceback.TracebackException(type(e), e, e.__traceback__)
        _cells_only(te, set())
        tb = "".join(te.format())
    except Exception:
        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    try:
        value = str(e)
    except BaseException:
        value = "<str() of the exception failed>"
    v, _ = _cut(value, limit)
    t, _ = _cut(tb, limit)
    return {"name": type(e).__name__, "value": v, "traceback": t}


def _figures(limit, results):
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return [], False
    out, total, cut = [], 0, False
    try:
        for num in plt.get_fignums():
            fig = plt.figure(num)
            data = _figure_data(fig, ("png",) + tuple(f for f in results.caps["formats"] if f != "png"))
            b = data["image/png"]
            if id(fig) not in results.shown:
                if "png" not in results.caps["formats"]:
                    del data["image/png"]
                results.add(fig, raw=data)
            if total + len(b) > limit:
                cut = True
                continue
            total += len(b)
            out.append(base64.b64encode(b).decode())
    except Exception as e:
        print("stockade: saving figures: %r" % e, file=sys.stderr)
    finally:
        try:
            plt.close("all")
        except Exception:
            pass
    return out, cut


# Rich results. Each result of a cell is a MIME bundle (Jupyter's and
# E2B's shape): text/plain always, and text/html, image/png, ... when the
# object offers them. display(obj) adds one anywhere in a cell, the last
# expression's value one more (is_main_result), and each figure left
# open one with its PNG (and SVG when asked). Where the root has IPython
# its DisplayFormatter formats an object that offers more than text, as
# Jupyter would; it is imported (some 40 MB, half a second) only for the
# first such object, never for plain values, whose text/plain is repr, as
# `result` is. A root without IPython gets the _repr_*_ methods and
# repr, from the standard library alone.
_REPR_METHODS = (
    ("text/html", "_repr_html_"), ("text/markdown", "_repr_markdown_"), ("text/latex", "_repr_latex_"),
    ("image/svg+xml", "_repr_svg_"), ("image/png", "_repr_png_"), ("image/jpeg", "_repr_jpeg_"),
    ("application/pdf", "_repr_pdf_"), ("application/json", "_repr_json_"),
    ("application/javascript", "_repr_javascript_"),
)
_RICH_NAMES = ("_repr_mimebundle_", "_ipython_display_") + tuple(m for _, m in _REPR_METHODS)
_BINARY = ("image/png", "image/jpeg", "application/pdf")
# What the server keeps (boundResults): a plain type/subtype, at most 16
# types a result, and an image that is what its type says. A result past
# these would be dropped whole; the driver leaves out the one value.
_MIME_NAME = re.compile(r"[a-z0-9.+-]+/[a-z0-9.+-]+\Z")
_MAX_TYPES = 16
_MAGIC = {"image/png": b"\x89PNG\r\n\x1a\n", "image/jpeg": b"\xff\xd8\xff"}


def _offers_rich(obj):
    # Asked of the type: an instance's __getattr__ (a mock, a proxy)
    # answers every name.
    t = type(obj)
    return any(callable(getattr(t, name, None)) for name in _RICH_NAMES)


def _ipython_formatter():
    if "formatter" not in _state:
        try:
            from IPython.core.formatters import DisplayFormatter
            _state["formatter"] = DisplayFormatter()
        except Exception:  # ImportError, or an IPython that does not load
            _state["formatter"] = None
    return _state["formatter"]


def _stdlib_format(obj):
    # What IPython's formatters would ask, without IPython.
    data = {}
    try:
        b = obj._repr_mimebundle_(include=None, exclude=None) if callable(getattr(type(obj), "_repr_mimebundle_", None)) else None
        if isinstance(b, tuple):
            b = b[0]
        if isinstance(b, dict):
            data.update(b)
    except Exception as e:
        print("stockade: _repr_mimebundle_: %r" % e, file=sys.stderr)
    for mime, name in _REPR_METHODS:
        if mime in data or not callable(getattr(type(obj), name, None)):
            continue
        try:
            v = getattr(obj, name)()
        except Exception as e:
            print("stockade: %s: %r" % (name, e), file=sys.stderr)
            continue
        if isinstance(v, tuple):  # (data, metadata)
            v = v[0]
        if v is not None:
            data[mime] = v
    return data


def _figure_data(fig, formats):
    data = {"text/plain": repr(fig)}
    for kind, mime in (("png", "image/png"), ("svg", "image/svg+xml")):
        if kind in formats:
            buf = io.BytesIO()
            fig.savefig(buf, format=kind)
            data[mime] = buf.getvalue() if kind == "png" else buf.getvalue().decode("utf-8", "replace")
    return data


def _is_figure(obj):
    mod = sys.modules.get("matplotlib.figure")
    return mod is not None and isinstance(obj, mod.Figure)


def _format(obj, formats):
    if _is_figure(obj):
        return _figure_data(obj, formats)
    if not _offers_rich(obj):
        return {"text/plain": repr(obj)}
    f = _ipython_formatter()
    if f is not None:
        data, _ = f.format(obj)
        if not data:
            return None  # _ipython_display_ showed it its own way
    else:
        data = _stdlib_format(obj)
    if not isinstance(data.get("text/plain"), str):
        data["text/plain"] = repr(obj)
    return data


def _mime_value(mime, v):
    # A value as JSON carries it: binary types in base64 (a str is
    # base64 already, as Jupyter has it), JSON types as JSON, text as str.
    if mime in _BINARY:
        if isinstance(v, str):
            try:
                v = base64.b64decode(v, validate=True)
            except ValueError:
                return None
        if not isinstance(v, (bytes, bytearray)) or not bytes(v).startswith(_MAGIC.get(mime, b"")):
            return None
        return base64.b64encode(bytes(v)).decode()
    if mime == "application/json" or mime.endswith("+json"):
        try:
            json.dumps(v)
        except (TypeError, ValueError):
            return None
        return v
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).decode("utf-8", "replace")
    return v if isinstance(v, str) else None


class _Results:
    # One cell's results, in order, held to the server's caps (which it
    # checks again: this runs in the cell's interpreter). Sizes are bytes
    # of JSON as the answer frame carries them.
    def __init__(self, caps, text_max):
        self.caps, self.text_max = caps, text_max
        self.list, self.used, self.truncated = [], 0, False
        self.shown = set()  # figures displayed: not again when the cell ends

    def add(self, obj, main=False, raw=None):
        if len(self.list) >= self.caps["count"]:
            self.truncated = True
            return
        data = raw if raw is not None else _format(obj, self.caps["formats"])
        if data is None:
            return
        if _is_figure(obj):
            self.shown.add(id(obj))
        budget = min(self.caps["bundle"], self.caps["bytes"] - self.used)
        plain = data.get("text/plain")
        plain, cut = _cut(plain if isinstance(plain, str) else repr(obj), self.text_max)
        while plain and len(json.dumps(plain)) > budget // 2:
            # text/plain is always there: cut to fit, the rest whole or not at all.
            plain, cut = plain[:len(plain) // 2], True
        out = {"text/plain": plain}
        size = len(json.dumps("text/plain")) + len(json.dumps(plain))
        for mime, v in data.items():
            if mime == "text/plain" or not isinstance(mime, str) or len(mime) > 127 or not _MIME_NAME.match(mime):
                continue
            if len(out) >= _MAX_TYPES:
                cut = True
                break
            v = _mime_value(mime, v)
            if v is None:
                continue
            n = len(json.dumps(mime)) + len(json.dumps(v))
            if size + n > budget:
                cut = True
                continue
            out[mime] = v
            size += n
        if size > budget:
            self.truncated = True
            return
        self.used += size
        self.list.append({"data": out, "is_main_result": main, "truncated": cut})


def _display(*objs, raw=False, **_ignored):
    """display(obj, ...): each object one more result of the cell, in order
    (IPython's display; include, exclude, metadata and display_id are not
    kept)."""
    results = _state.get("results")
    for obj in objs:
        if results is None:
            # Outside a cell (a thread that outlived it): as IPython
            # without a shell does.
            print(repr(obj))
        elif raw and isinstance(obj, dict):
            results.add(None, raw=obj)
        else:
            results.add(obj)


class _IPythonDisplay:
    # A finder that loads nothing itself: when the cell imports IPython's
    # display functions, their display becomes the session's, so that
    # `from IPython.display import display` adds results as in Jupyter
    # (without a running IPython shell, IPython's own only prints).
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != "IPython.core.display_functions":
            return None
        for finder in sys.meta_path:
            if finder is _IPythonDisplay or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                load = spec.loader.exec_module

                def exec_module(module, load=load):
                    load(module)
                    module.display = _display
                spec.loader.exec_module = exec_module
                return spec
        return None


def _run_cell(code, filename, ns):
    # As a notebook does: the cell runs as statements, and a last
    # expression is evaluated and its value shown (None is not).
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    try:
        tree = ast.parse(code, filename, "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = compile(ast.Expression(tree.body.pop().value), filename, "eval")
        body = compile(tree, filename, "exec")
    except (SyntaxError, ValueError) as e:
        # The whole cell is compiled before any of it runs, as Python
        # compiles a script. A cell that does not compile has no frames of
        # its own: the ones it would carry are ast.parse's and the
        # driver's, and the error names the cell's line itself.
        e.__traceback__ = None
        raise
    exec(body, ns)
    if last is None:
        return None
    value = eval(last, ns)
    if value is not None:
        ns["_"] = value
    return value


class _Streams:
    # The jail's own stdin (the server's pipe, closed), stdout and
    # stderr, kept aside: between cells 0 reads /dev/null and 1 and 2 go
    # where they went before the session began.
    def __init__(self):
        self.null = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
        self.out = os.dup(1)
        self.err = os.dup(2)

    def cell(self, fds):
        for target, fd in zip((0, 1, 2), fds):
            os.dup2(fd, target)
        for fd in fds:
            os.close(fd)
        enc = sys.__stdin__.encoding if sys.__stdin__ else "utf-8"
        # A fresh reader: bytes buffered from an earlier cell's stdin are
        # not this cell's.
        sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "rb", closefd=False)), encoding=enc)

    def restore(self):
        for f in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            try:
                f.flush()
            except BaseException:
                pass
        # Closing the cell's pipes here is the end of its output for the
        # server, unless a process the cell started holds them.
        os.dup2(self.null, 0)
        os.dup2(self.out, 1)
        os.dup2(self.err, 2)


def _exec(req, fds, streams, ns, answer, chan):
    limit = req["result_max"]
    if len(fds) != 3:
        for fd in fds:
            os.close(fd)
        answer["status"] = "driver"
        answer["error"] = {"name": "DriverError", "value": "want 3 descriptors, got %d" % len(fds), "traceback": ""}
        return
    streams.cell(fds)
    results = _state["results"] = _Results(req["rich"], limit)
    # The exec's env, for this cell alone: what the names held before is
    # put back after it (the server checked the names).
    env = req.get("env") or {}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        _state["user"] = True
        try:
            # From this frame on the server may interrupt the cell: one
            # that came before would have been dropped as late.
            chan.send({"started": req["token"]})
            value = _run_cell(req["code"], "<cell %d>" % req["n"], ns)
            if value is not None:
                answer["result"], answer["result_truncated"] = _cut(repr(value), limit)
                # Formatting runs the object's own code (_repr_html_, a
                # figure's artists): still the cell's, and interruptible.
                results.add(value, main=True)
        except BaseException as e:
            answer["status"] = "exception"
            answer["error"] = _error(e, limit)
        # savefig may run the cell's own code (artists, formatters): still
        # the cell's time, and interruptible.
        try:
            answer["images"], answer["images_truncated"] = _figures(req["images_max"], results)
        except BaseException as e:
            if answer["error"] is None:
                answer["status"] = "exception"
                answer["error"] = _error(e, limit)
    finally:
        _state["user"] = False
        _state["results"] = None
        answer["results"], answer["results_truncated"] = results.list, results.truncated
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        streams.restore()


def _restart(req, chan):
    # A fresh interpreter in the same jail, /work and /tmp kept: every
    # other process of the jail killed (kill(-1) reaches every process of
    # the jail's pid namespace this user may signal, never its init), then
    # the driver's command line exec'd again, with a job (in its
    # environment) that makes it a session's driver whose first frame
    # carries the server's new hello. The
    # channel stays descriptor 3 across the exec; every other descriptor
    # the driver holds is close-on-exec.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    # The cells' own children are the driver's, and would stay its
    # zombies across the exec: those already dead are reaped here, without
    # waiting. A thread a cell left running is still here and may fork
    # after the kill (a blocking wait would then wait on its child, which
    # may never end): the fresh interpreter, single-threaded, kills and
    # reaps again before its hello, and the server reads from the host
    # that nothing else is left.
    _kill_others(os.WNOHANG)
    env = dict(_BASE_ENV)
    env[_RESTART_ENV] = json.dumps({"op": "session", "hello": req["hello"], "env": req.get("session_env") or {},
                                    "restart": True})
    os.set_inheritable(CHAN, True)
    # Whatever else a cell left open and inheritable would be the fresh
    # interpreter's: only 0 to 2 and the channel go through the exec.
    os.closerange(CHAN + 1, os.sysconf("SC_OPEN_MAX"))
    argv = list(getattr(sys, "orig_argv", None) or [])
    if not argv:
        with open("/proc/self/cmdline", "rb") as f:
            argv = [a.decode("utf-8", "surrogateescape") for a in f.read().split(b"\0")[:-1]]
    # What was done to the process's signals survives execve: an ignored
    # signal stays ignored (a cell's signal.SIG_IGN), a blocked one blocked
    # (SIGINT, blocked above: left so, no timeout or interrupt would reach
    # the fresh interpreter and each would cost the session). Put back as
    # a fresh process has them; a SIGINT that comes now finds the driver
    # outside a cell, and is dropped.
    for sig in signal.valid_signals():
        if sig not in (signal.SIGINT, signal.SIGKILL, signal.SIGSTOP):
            try:
                signal.signal(sig, signal.SIG_DFL)
            except (OSError, ValueError):
                pass
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    os.execve(sys.executable or "/usr/bin/python3", argv, env)


def _kill_others(wait_flags):
    # kill(-1) reaches every process of the jail's pid namespace this user
    # may signal, never its init; then the driver's own children are
    # reaped: all of them (wait_flags 0), or those already dead (WNOHANG).
    try:
        os.kill(-1, signal.SIGKILL)
    except ProcessLookupError:
        pass  # no other process
    while True:
        try:
            if os.waitpid(-1, wait_flags)[0] == 0:
                break
        except ChildProcessError:
            break


def _kill_rest():
    # A restarted driver's first act: the old one's kill(-1) spared its own
    # threads, and one of them may have forked before the execve. This
    # process is single-threaded, so nothing forks now: kill(-1) reaches
    # every other process of the jail but init, and the driver's own
    # children (the old one's, inherited across the exec) are reaped.
    _kill_others(0)


def main(job, chan):
    if job.get("restart"):
        _kill_rest()
    signal.signal(signal.SIGINT, _on_sigint)
    os.environ.update(job.get("env") or {})
    streams = _Streams()
    main_mod = types.ModuleType("__main__")
    main_mod.__builtins__ = builtins
    # The cells' namespace is __main__ itself, so that pickle finds the
    # classes a cell defines (multiprocessing, joblib).
    sys.modules["__main__"] = main_mod
    ns = main_mod.__dict__
    # display is a builtin in the cells, as in IPython; IPython's own
    # (when the root has it) is the same function once imported.
    builtins.display = _display
    sys.meta_path.insert(0, _IPythonDisplay)
    chan.send({"hello": job["hello"], "python": sys.version.split()[0]})
    while True:
        try:
            req, fds = chan.recv()
        except KeyboardInterrupt:
            continue
        except Exception:
            os._exit(LOST)
        if req.get("op") == "restart":
            try:
                _restart(req, chan)
            finally:
                os._exit(LOST)  # execve returned: it failed
        if req.get("op") != "exec":
            os._exit(LOST)
        answer = {"token": req["token"], "status": "ok", "result": None, "result_truncated": False,
                  "error": None, "images": [], "images_truncated": False, "results": [], "results_truncated": False}
        try:
            _exec(req, fds, streams, ns, answer, chan)
        except KeyboardInterrupt as e:
            # Only a handler the cell installed raises outside the cell.
            streams.restore()
            answer["status"], answer["error"] = "exception", _error(e, req["result_max"])
        try:
            chan.send(answer)
        except Exception:
            os._exit(LOST)



# A single-use run: the job's bulk read from the channel, its files
# written to /work, the channel closed, then argv exec'd or the code run
# as __main__; at the end the figures still open and the rich results are
# saved in the job's figure_dir, and the driver exits with the program's
# status.
def _run(job, chan):
    try:
        if "argv" in job:
            argv = [chan.read(n).decode("utf-8", "surrogateescape") for n in job["argv"]]
        else:
            code = chan.read(job["code"]).decode("utf-8", "surrogateescape")
        for f in job.get("files") or ():
            with open(os.path.join("/work", f["name"]), "wb") as out:
                for c in chan.chunks(f["size"]):
                    out.write(c)
    except EOFError:
        os._exit(0)  # the server gave the jail up
    chan.sock.close()
    if "argv" in job:
        sys.stdout.flush()
        try:
            os.execvp(argv[0], argv)
        except OSError as e:
            print("stockade: %s: %s" % (argv[0], e.strerror), file=sys.stderr)
            os._exit(127 if isinstance(e, FileNotFoundError) else 126)
    linecache.cache["<code>"] = (len(code), None, code.splitlines(True), "<code>")
    g = {"__name__": "__main__", "__builtins__": builtins}
    # display() adds rich results, as in a session's cell.
    results = _state["results"] = _Results(job["rich"], job["result_max"])
    builtins.display = _display
    sys.meta_path.insert(0, _IPythonDisplay)
    status = 0
    try:
        exec(compile(code, "<code>", "exec"), g)
    except SystemExit as e:
        status = e.code
    except BaseException as e:
        # The traceback from the program's own frames: this one is the
        # driver's (a SyntaxError has no other, and shows the code alone).
        traceback.print_exception(type(e), e, e.__traceback__.tb_next)
        status = 1
    _save_figures(job["figure_dir"], results)
    _exit(status)


def _save_figures(figdir, results):
    # Each figure left open: a PNG in figdir, and a rich result unless the
    # program displayed it; then the results, for the server.
    plt = sys.modules.get("matplotlib.pyplot")
    try:
        nums = plt.get_fignums() if plt is not None else []
        if nums or results.list or results.truncated:
            os.makedirs(figdir, exist_ok=True)
        for i, n in enumerate(nums):
            fig = plt.figure(n)
            data = _figure_data(fig, ["png"] + [f for f in results.caps["formats"] if f != "png"])
            with open(os.path.join(figdir, "%03d.png" % i), "wb") as f:
                f.write(data["image/png"])
            if id(fig) not in results.shown:
                results.add(fig, raw=data)
    except Exception as e:
        print("stockade: saving figures: %r" % e, file=sys.stderr)
    if results.list or results.truncated:
        with open(os.path.join(figdir, "results.json"), "w") as f:
            json.dump({"results": results.list, "truncated": results.truncated}, f)


def _exit(status):
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


def _start():
    # The jail's one job: a restarted driver's from its environment, any
    # other from the channel, which the server writes when the jail
    # leaves the pool (until then the driver waits here, imports done).
    chan = _Chan(CHAN)
    if _RESTART_JOB is not None:
        main(json.loads(_RESTART_JOB), chan)
    try:
        job, fds = chan.recv()
    except Exception:
        os._exit(0)  # the server gave the jail up
    for fd in fds:
        os.close(fd)
    if job.get("op") == "session":
        main(job, chan)
    elif job.get("op") == "run":
        _run(job, chan)
    os._exit(LOST)


if __name__ == "_stockade_driver":
    _start()
