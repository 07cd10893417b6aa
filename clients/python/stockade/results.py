"""Typed results: dataclasses that mirror the server's JSON.

Each field is the JSON key of the same name; bytes where the JSON has
base64 (images, files). ``raw`` keeps the whole object as the server sent
it, fields this client does not know among them.
"""

import base64
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


def _b64_or_none(s: Any) -> Optional[bytes]:
    """s decoded from base64, or None where it is not base64: what a
    jailed program sent through a server that did not check it must not
    cost the caller the whole answer (binascii.Error from session.run)."""
    if not isinstance(s, str):
        return None
    try:
        return base64.b64decode(s, validate=True)
    except ValueError:  # binascii.Error, and non-ASCII text
        return None


def _b64(s: Any) -> bytes:
    b = _b64_or_none(s)
    return b if b is not None else b""


@dataclass
class Image:
    """One matplotlib figure: ``type`` is "png", ``data`` its bytes."""

    type: str
    data: bytes

    def save(self, path: str) -> None:
        with open(path, "wb") as f:
            f.write(self.data)


# The short names a MIME bundle's formats are also known by (E2B's, and
# Result's properties), and which of them are binary: base64 on the wire,
# bytes here.
_FORMATS = {
    "text": "text/plain", "html": "text/html", "markdown": "text/markdown", "latex": "text/latex",
    "json": "application/json", "javascript": "application/javascript", "svg": "image/svg+xml",
    "png": "image/png", "jpeg": "image/jpeg", "pdf": "application/pdf",
}
_BINARY = ("image/png", "image/jpeg", "application/pdf")


@dataclass
class Result:
    """One result of a session's exec, as a MIME bundle: ``data`` maps a
    MIME type to its content (text as str; PNG, JPEG and PDF as bytes).

    The server sends one per display(obj) in the cell, then the cell's
    last expression (``text/plain``, its repr; ``is_main_result`` True),
    then each figure the cell left open (``image/png``, ``image/svg+xml``
    as the exec's figure_formats ask). Formats it adds arrive as more keys
    of ``data``, with no change to this type or to on_result."""

    data: Dict[str, Any] = field(default_factory=dict)
    is_main_result: bool = False
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    def formats(self) -> List[str]:
        """The short names of the formats it has ("text", "png", ...), or
        the MIME type where there is none."""
        short = {v: k for k, v in _FORMATS.items()}
        return [short.get(m, m) for m in self.data]

    text = property(lambda self: self.data.get("text/plain"))
    html = property(lambda self: self.data.get("text/html"))
    markdown = property(lambda self: self.data.get("text/markdown"))
    latex = property(lambda self: self.data.get("text/latex"))
    json = property(lambda self: self.data.get("application/json"))
    javascript = property(lambda self: self.data.get("application/javascript"))
    svg = property(lambda self: self.data.get("image/svg+xml"))
    png = property(lambda self: self.data.get("image/png"))
    jpeg = property(lambda self: self.data.get("image/jpeg"))
    pdf = property(lambda self: self.data.get("application/pdf"))

    @classmethod
    def from_json(cls, doc: Dict[str, Any]) -> "Result":
        """A bundle as a server may send it: its formats under "data", or
        beside is_main_result, by MIME type or by short name. A binary
        format whose value is not base64 is left out; it never raises."""
        bundle = doc.get("data") if isinstance(doc.get("data"), dict) else doc
        data: Dict[str, Any] = {}
        for k, v in bundle.items():
            mime = _FORMATS.get(k, k)
            if "/" not in mime or v is None:
                continue
            if mime in _BINARY and isinstance(v, str):
                v = _b64_or_none(v)
                if v is None:
                    continue  # not base64: the format is left out, the rest kept
            data[mime] = v
        return cls(data=data, is_main_result=bool(doc.get("is_main_result")), raw=doc)


@dataclass
class ExecError:
    """The exception a session's exec raised, as Python formats it."""

    name: str
    value: str
    traceback: str


@dataclass
class FileEntry:
    name: str
    type: str  # file, dir, symlink, other
    size: int


def _fill(cls, doc: Dict[str, Any], **converted):
    """cls from doc: each field from the key of its name, converted ones
    as given, raw the whole doc."""
    kw = {}
    for f in dataclasses.fields(cls):
        if f.name == "raw":
            kw["raw"] = doc
        elif f.name in converted:
            kw[f.name] = converted[f.name]
        elif f.name in doc and doc[f.name] is not None:
            kw[f.name] = doc[f.name]
    return cls(**kw)


def _images(doc: Dict[str, Any]) -> List[Image]:
    return [Image(type=i.get("type", "png"), data=_b64(i.get("data"))) for i in doc.get("images") or []]


@dataclass
class RunResult:
    """A single-use run (POST /v1/run): the ``stockade run --json`` object,
    with the files the run created or changed in /work and its figures."""

    verdict: str = ""
    exit_code: int = 0
    signal: Optional[int] = None
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    wall_ms: float = 0.0
    cpu_ms: float = 0.0
    peak_memory_bytes: int = 0
    limits: Dict[str, Any] = field(default_factory=dict)
    blocked_syscalls: List[Dict[str, Any]] = field(default_factory=list)
    network: List[Dict[str, Any]] = field(default_factory=list)
    error: Optional[str] = None
    files: Dict[str, bytes] = field(default_factory=dict)
    files_truncated: bool = False
    files_skipped: List[str] = field(default_factory=list)
    images: List[Image] = field(default_factory=list)
    pool: Dict[str, Any] = field(default_factory=dict)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"

    @classmethod
    def from_json(cls, doc: Dict[str, Any]) -> "RunResult":
        files = {name: _b64(data) for name, data in (doc.get("files") or {}).items()}
        return _fill(cls, doc, files=files, images=_images(doc))


@dataclass
class ExecResult:
    """One exec of a session (POST /v1/sessions/{id}/exec).

    ``state`` is "kept" when the session's Python state survived the exec
    (the interpreter answered), "lost" otherwise. ``result`` is the repr of
    the cell's last expression; ``error`` the exception it raised;
    ``results`` every result as a MIME bundle (the last expression's, then
    each figure's), what on_result is called with."""

    verdict: str = ""
    state: str = ""
    why: str = ""
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    result: Optional[str] = None
    error: Optional[ExecError] = None
    images: List[Image] = field(default_factory=list)
    results: List[Result] = field(default_factory=list)
    files_changed: List[str] = field(default_factory=list)
    execution_count: int = 0
    wall_ms: float = 0.0
    cpu_ms: float = 0.0
    peak_memory_bytes: int = 0
    blocked_syscalls: List[Dict[str, Any]] = field(default_factory=list)
    network: List[Dict[str, Any]] = field(default_factory=list)
    session: Dict[str, Any] = field(default_factory=dict)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"

    @classmethod
    def from_json(cls, doc: Dict[str, Any]) -> "ExecResult":
        err = doc.get("error")
        error = None
        if isinstance(err, dict):
            error = ExecError(name=err.get("name", ""), value=err.get("value", ""), traceback=err.get("traceback", ""))
        return _fill(cls, doc, error=error, images=_images(doc), results=_results(doc))


def _results(doc: Dict[str, Any]) -> List[Result]:
    """A server's results as it sends them, where it does; else today's
    two kinds, made into bundles: the last expression's repr, then each
    figure."""
    if isinstance(doc.get("results"), list):
        return [Result.from_json(r) for r in doc["results"] if isinstance(r, dict)]
    out = []
    if isinstance(doc.get("result"), str):
        out.append(Result(data={"text/plain": doc["result"]}, is_main_result=True, raw={"result": doc["result"]}))
    for i in doc.get("images") or []:
        if isinstance(i, dict):
            out.append(Result(data={"image/" + str(i.get("type", "png")): _b64(i.get("data"))}, raw=i))
    return out


@dataclass
class SessionInfo:
    """A session as the server describes it (creation, GET)."""

    session_id: str = ""
    profile: str = ""
    alive: bool = True
    busy: bool = False
    execution_count: int = 0
    restarts: int = 0
    memory_bytes: int = 0
    peak_memory_bytes: int = 0
    cpu_ms: float = 0.0
    limits: Dict[str, Any] = field(default_factory=dict)
    created_at: str = ""
    expires_at: str = ""
    idle_expires_at: str = ""
    verdict: str = ""
    why: str = ""
    pool: Dict[str, Any] = field(default_factory=dict)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, doc: Dict[str, Any]) -> "SessionInfo":
        return _fill(cls, doc)


@dataclass
class RestartResult:
    """A session's restart (POST /v1/sessions/{id}/restart): a fresh
    interpreter in the same jail. ``restarted`` True and ``state`` "fresh":
    every variable, import and process is gone, /work and /tmp are kept;
    False and "lost": the interpreter did not come back and the session
    ended (``why`` says how). ``python`` is the fresh interpreter's
    version, ``restarts`` the session's count, this one included;
    ``session`` its state after, as an exec's ``session`` is."""

    session_id: str = ""
    restarted: bool = False
    state: str = ""
    why: str = ""
    python: str = ""
    restarts: int = 0
    wall_ms: float = 0.0
    session: Dict[str, Any] = field(default_factory=dict)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, doc: Dict[str, Any]) -> "RestartResult":
        return _fill(cls, doc)


@dataclass
class SessionEnd:
    """The accounting of a whole session (DELETE /v1/sessions/{id})."""

    session_id: str = ""
    verdict: str = ""
    why: str = ""
    execution_count: int = 0
    wall_ms: float = 0.0
    cpu_ms: float = 0.0
    peak_memory_bytes: int = 0
    blocked_syscalls: List[Dict[str, Any]] = field(default_factory=list)
    network: List[Dict[str, Any]] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, doc: Dict[str, Any]) -> "SessionEnd":
        return _fill(cls, doc)


def file_entries(doc: Dict[str, Any]) -> List[FileEntry]:
    return [FileEntry(name=e.get("name", ""), type=e.get("type", ""), size=e.get("size", 0)) for e in doc.get("entries") or []]
