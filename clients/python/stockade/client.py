"""The blocking client."""

from typing import Any, Callable, List, Mapping, Optional, Sequence, Union

from . import _api, _http
from .results import ExecError, ExecResult, FileEntry, RestartResult, Result, RunResult, SessionEnd, SessionInfo

Output = Optional[Callable[[str], None]]
OnResult = Optional[Callable[[Result], None]]
OnError = Optional[Callable[[ExecError], None]]


class Client:
    """A client of ``stockade serve`` on its unix socket, or of
    ``stockade gateway`` over HTTPS.

    ``socket``: the argument, else ``$STOCKADE_SOCKET``, else
    ``/run/stockade/stockade.sock``. ``url`` (``https://HOST:PORT``, else
    ``$STOCKADE_URL``) with ``token`` (else ``$STOCKADE_TOKEN``) sends every
    request to a gateway instead, its certificate verified against
    ``ca_file`` (else the system's CAs); an ``http://`` url is refused, as
    the token would travel in the clear. Given neither socket nor url, a
    set ``$STOCKADE_URL`` wins over the socket. ``timeout`` bounds each
    request's socket operations, in seconds (None: none; a run's own
    timeout applies).
    """

    def __init__(self, socket: Optional[str] = None, timeout: Optional[float] = None, *,
                 url: Optional[str] = None, token: Optional[str] = None, ca_file: Optional[str] = None):
        self.endpoint = _api.endpoint(socket, url, token, ca_file)
        # The socket's path; None for a gateway (then .url).
        self.socket = self.endpoint if isinstance(self.endpoint, str) else None
        self.url = None if isinstance(self.endpoint, str) else self.endpoint.url
        self.timeout = timeout

    def _do(self, call: _api.Call, on_line=None) -> Any:
        answer = _http.request(self.endpoint, call.method, call.target, call.body, call.content_type,
                               call.stream, on_line, self.timeout)
        return call.finish(answer)

    def run(self, code: str, files: Optional[_api.Files] = None, stdin: Union[None, str, bytes] = None,
            limits: Optional[Mapping[str, Any]] = None, on_stdout: Output = None, on_stderr: Output = None,
            profile: Optional[str] = None) -> RunResult:
        """Runs code in a fresh single-use jail. ``files`` (name -> bytes or
        str) are written into /work first; ``limits`` tighten the profile's
        ({"timeout": "5s", "memory": "256M"}); on_stdout and on_stderr get
        the output as it comes. A failed run is a result, not an exception."""
        handler = _api.output_handler(on_stdout, on_stderr)
        call = _api.run(code, files, stdin, limits, profile, stream=handler is not None)
        return self._do(call, handler)

    def session(self, profile: Optional[str] = None, limits: Optional[Mapping[str, Any]] = None,
                idle_timeout: Union[None, float, str] = None, ttl: Union[None, float, str] = None,
                files: Optional[_api.Files] = None, env: Optional[Mapping[str, str]] = None) -> "Session":
        """Starts a session: one jail whose Python state lasts from one
        .run() to the next. Use it as a context manager, which closes it."""
        info = self._do(_api.create_session(profile, limits, idle_timeout, ttl, files, env))
        return Session(self, info)

    def attach(self, session_id: str) -> "Session":
        """A session made earlier (by this process or another of the same
        user), by its id: NotFoundError if there is none, GoneError if it
        ended."""
        return Session(self, self._do(_api.session_info(session_id)))

    def sessions(self) -> List[SessionInfo]:
        """The caller's own live sessions."""
        return self._do(_api.list_sessions())

    def health(self) -> dict:
        return self._do(_api.health())


class Files:
    """A session's /work: read, write, list and delete, as raw bytes."""

    def __init__(self, client: Client, session_id: str):
        self._client = client
        self._id = session_id

    def read(self, path: str) -> bytes:
        return self._client._do(_api.read_file(self._id, path))

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return self.read(path).decode(encoding)

    def write(self, path: str, data: Union[bytes, str]) -> None:
        self._client._do(_api.write_file(self._id, path, data))

    def delete(self, path: str) -> None:
        self._client._do(_api.delete_file(self._id, path))

    def list(self, path: str = "") -> List[FileEntry]:
        return self._client._do(_api.list_files(self._id, path))


class Session:
    """A live session. ``.run()`` keeps state between calls; ``.files``
    reaches its /work; ``.close()`` (or leaving the ``with`` block) ends it
    and returns its accounting."""

    def __init__(self, client: Client, info: SessionInfo):
        self._client = client
        self.info = info
        self.id = info.session_id
        self.files = Files(client, self.id)
        self.end: Optional[SessionEnd] = None

    def run(self, code: str, stdin: Union[None, str, bytes] = None, timeout: Union[None, float, str] = None,
            files: Optional[_api.Files] = None, on_stdout: Output = None, on_stderr: Output = None,
            on_result: OnResult = None, on_error: OnError = None, env: Optional[Mapping[str, str]] = None,
            figure_formats: Optional[Sequence[str]] = None) -> ExecResult:
        """Runs one cell. A cell that raised, timed out or ran out of
        memory is a result (see .verdict, .state, .error). on_result is
        called with each Result of the cell (its last expression, its
        figures), on_error with the ExecError it raised, if it did.
        ``env`` is added to os.environ for this cell alone;
        ``figure_formats`` (["png"], ["svg"], ["png", "svg"]) is how its
        figures come back."""
        handler = _api.output_handler(on_stdout, on_stderr)
        call = _api.exec_(self.id, code, stdin, timeout, files, handler is not None, env, figure_formats)
        res = self._client._do(call, handler)
        return _api.deliver(res, on_result, on_error)

    def set_timeout(self, ttl: _api.Duration) -> SessionInfo:
        """The session now ends ttl ("30m", seconds or a timedelta) from
        now, sooner or later than before; its SessionInfo after. APIError
        (422) past the server's --session-ttl or --session-max-life,
        GoneError once it ended."""
        self.info = self._client._do(_api.set_timeout(self.id, ttl))
        return self.info

    def restart(self) -> RestartResult:
        """A fresh interpreter in the same jail: every variable, import and
        process is gone; /work, /tmp, the id, limits and expiry are kept.
        A restart that failed ended the session: restarted is False,
        state "lost". BusyError while a cell runs past --queue-wait."""
        return self._client._do(_api.restart(self.id))

    def interrupt(self) -> None:
        """KeyboardInterrupt in the running exec (BusyError when idle)."""
        self._client._do(_api.interrupt(self.id))

    def refresh(self) -> SessionInfo:
        self.info = self._client._do(_api.session_info(self.id))
        return self.info

    def close(self) -> SessionEnd:
        if self.end is None:
            self.end = self._client._do(_api.close_session(self.id))
        return self.end

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
