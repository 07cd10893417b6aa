"""The API's requests and answers, once for both clients: each function
returns a Call, which the blocking and the async client send their own
way and finish the same."""

import base64
import json
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Dict, Mapping, Optional, Tuple, Union
from urllib.parse import quote

from . import _http, results
from .errors import ProtocolError, for_status, refusal_message

DEFAULT_SOCKET = "/run/stockade/stockade.sock"

Files = Mapping[str, Union[bytes, str]]
Answer = Tuple[int, Dict[str, str], bytes]


def socket_path(socket: Optional[str]) -> str:
    """The argument, then $STOCKADE_SOCKET, then the server's default."""
    return socket or os.environ.get("STOCKADE_SOCKET") or DEFAULT_SOCKET


def endpoint(socket: Optional[str], url: Optional[str], token: Optional[str],
             ca_file: Optional[str]) -> "_http.Endpoint":
    """Where a client sends its requests: the socket given, else the url
    given, else $STOCKADE_URL (with $STOCKADE_TOKEN), else the socket of
    $STOCKADE_SOCKET or the server's default. A token goes to a gateway
    only, over https: with a socket it is refused, not dropped."""
    if socket and url:
        raise ValueError("give socket= or url=, not both")
    if socket:
        if token is not None or ca_file is not None:
            raise ValueError("token= and ca_file= are for url= (a gateway), not a unix socket")
        return socket
    url = url or os.environ.get("STOCKADE_URL")
    if not url:
        if token is not None or ca_file is not None:
            raise ValueError("token= and ca_file= are for url= (a gateway), not a unix socket")
        return socket_path(None)
    if token is None:
        token = os.environ.get("STOCKADE_TOKEN")
    return _http.Remote(url, token, ca_file)


@dataclass
class Call:
    method: str
    target: str
    body: Optional[bytes] = None
    content_type: Optional[str] = None
    stream: bool = False
    parse: Callable[[int, bytes], Any] = lambda status, body: None
    ok: Tuple[int, ...] = (200,)

    def finish(self, answer: Answer) -> Any:
        status, _, body = answer
        if status not in self.ok:
            # A run whose jail could not be set up is answered 500 with a
            # result (verdict "error"): that is the run's outcome.
            if not (status == 500 and self.target == "/v1/run" and _has_verdict(body)):
                raise for_status(self.method, self.target, status, refusal_message(body, None))
        return self.parse(status, body)


def _has_verdict(body: bytes) -> bool:
    try:
        doc = json.loads(body)
    except ValueError:
        return False
    return isinstance(doc, dict) and "verdict" in doc


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError as e:
        raise ProtocolError(f"an answer that is not JSON: {body[:200]!r}") from e


def _object(body: bytes) -> Dict[str, Any]:
    doc = _json(body)
    if not isinstance(doc, dict):
        raise ProtocolError(f"an answer that is not a JSON object: {body[:200]!r}")
    return doc


def _post(target: str, doc: Dict[str, Any], parse, ok=(200,), stream=False) -> Call:
    body = json.dumps(doc).encode()
    return Call("POST", target, body, "application/json", stream, parse, ok)


def _files(files: Optional[Files]) -> Dict[str, str]:
    out = {}
    for name, data in (files or {}).items():
        if isinstance(data, str):
            data = data.encode()
        out[name] = base64.b64encode(data).decode()
    return out


# Limits in the profile's syntax: numbers are taken as seconds or bytes.
_TEXT_LIMITS = ("timeout", "cpu_time", "memory", "output_limit")


def _limits(limits: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    out = dict(limits or {})
    for k in _TEXT_LIMITS:
        if k in out and not isinstance(out[k], str):
            out[k] = str(out[k])
    return out


Duration = Union[None, int, float, str, timedelta]


def _duration(d: Duration) -> Optional[str]:
    """A duration in the server's syntax: a str as given ("30m"), a number
    as seconds, a timedelta as its seconds; in milliseconds, which Go's
    time.ParseDuration takes at any size."""
    if d is None or isinstance(d, str):
        return d
    if isinstance(d, timedelta):
        d = d.total_seconds()
    if isinstance(d, bool) or not isinstance(d, (int, float)):
        raise TypeError(f"a duration is a str like \"30m\", seconds or a timedelta, not {type(d).__name__}")
    return f"{int(round(d * 1000))}ms"


def session_path(session_id: str) -> str:
    return "/v1/sessions/" + quote(session_id, safe="")


def file_target(session_id: str, path: str) -> str:
    """A path in /work, each component escaped; the server checks it."""
    path = path[len("/work/"):] if path.startswith("/work/") else path
    return session_path(session_id) + "/files/" + quote(path, safe="/")


def run(code, files=None, stdin=None, limits=None, profile=None, stream=False) -> Call:
    doc: Dict[str, Any] = {"code": code}
    if files:
        doc["files"] = _files(files)
    if stdin is not None:
        doc["stdin"] = stdin if isinstance(stdin, str) else stdin.decode()
    if limits:
        doc["limits"] = _limits(limits)
    if profile:
        doc["profile"] = profile
    return _post("/v1/run", doc, lambda s, b: results.RunResult.from_json(_object(b)), stream=stream)


def create_session(profile=None, limits=None, idle_timeout=None, ttl=None, files=None, env=None) -> Call:
    doc: Dict[str, Any] = {}
    if profile:
        doc["profile"] = profile
    if limits:
        doc["limits"] = _limits(limits)
    if idle_timeout is not None:
        doc["idle_timeout"] = _duration(idle_timeout)
    if ttl is not None:
        doc["ttl"] = _duration(ttl)
    if files:
        doc["files"] = _files(files)
    if env:
        doc["env"] = dict(env)
    return _post("/v1/sessions", doc, lambda s, b: results.SessionInfo.from_json(_object(b)), ok=(201,))


def exec_(session_id, code, stdin=None, timeout=None, files=None, stream=False, env=None,
          figure_formats=None) -> Call:
    doc: Dict[str, Any] = {"code": code}
    if stdin is not None:
        doc["stdin"] = stdin if isinstance(stdin, str) else stdin.decode()
    if timeout is not None:
        doc["timeout"] = _duration(timeout)
    if files:
        doc["files"] = _files(files)
    if env:
        doc["env"] = dict(env)
    if figure_formats is not None:
        # A lone str would go out as its letters; the server refuses
        # anything but "png" and "svg", each once, and says so (400).
        doc["figure_formats"] = [figure_formats] if isinstance(figure_formats, str) else list(figure_formats)
    return _post(session_path(session_id) + "/exec", doc, lambda s, b: results.ExecResult.from_json(_object(b)), stream=stream)


def interrupt(session_id) -> Call:
    return Call("POST", session_path(session_id) + "/interrupt", b"", None, False, lambda s, b: None, (202,))


def set_timeout(session_id, ttl: Duration) -> Call:
    """The session ends ttl from now (POST .../ttl): its info after."""
    if ttl is None:
        raise TypeError("set_timeout needs a ttl")
    return _post(session_path(session_id) + "/ttl", {"ttl": _duration(ttl)},
                 lambda s, b: results.SessionInfo.from_json(_object(b)))


def restart(session_id) -> Call:
    """A fresh interpreter in the same jail, /work kept (POST .../restart)."""
    return Call("POST", session_path(session_id) + "/restart", b"", None, False,
                lambda s, b: results.RestartResult.from_json(_object(b)))


def session_info(session_id) -> Call:
    return Call("GET", session_path(session_id), parse=lambda s, b: results.SessionInfo.from_json(_object(b)))


def list_sessions() -> Call:
    def parse(status, body):
        doc = _json(body)
        items = doc.get("sessions", []) if isinstance(doc, dict) else doc
        return [results.SessionInfo.from_json(d) for d in items]

    return Call("GET", "/v1/sessions", parse=parse)


def close_session(session_id) -> Call:
    return Call("DELETE", session_path(session_id), parse=lambda s, b: results.SessionEnd.from_json(_object(b)))


def read_file(session_id, path) -> Call:
    return Call("GET", file_target(session_id, path), parse=lambda s, b: b)


def write_file(session_id, path, data: Union[bytes, str]) -> Call:
    if isinstance(data, str):
        data = data.encode()
    return Call("PUT", file_target(session_id, path), data, "application/octet-stream", False, lambda s, b: None, (200, 201, 204))


def delete_file(session_id, path) -> Call:
    return Call("DELETE", file_target(session_id, path), parse=lambda s, b: None, ok=(200, 204))


def list_files(session_id, path="") -> Call:
    target = session_path(session_id) + "/files"
    path = "" if path in ("/work", "/work/") else path
    path = path[len("/work/"):] if path.startswith("/work/") else path
    if path:
        target += "?path=" + quote(path, safe="")
    return Call("GET", target, parse=lambda s, b: results.file_entries(_object(b)))


def health() -> Call:
    return Call("GET", "/v1/health", parse=lambda s, b: _object(b))


def deliver(res: results.ExecResult, on_result, on_error) -> results.ExecResult:
    """Calls on_result once per result of the exec, in order, then
    on_error once with the exception the cell raised, if it raised."""
    if on_result is not None:
        for r in res.results:
            on_result(r)
    if on_error is not None and res.error is not None:
        on_error(res.error)
    return res


def output_handler(on_stdout, on_stderr):
    """Routes a stream's output lines to the callbacks."""
    if on_stdout is None and on_stderr is None:
        return None

    def handle(doc):
        cb = on_stdout if doc.get("type") == "stdout" else on_stderr if doc.get("type") == "stderr" else None
        if cb is not None:
            cb(doc.get("data", ""))

    return handle
