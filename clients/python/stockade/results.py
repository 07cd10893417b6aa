"""Typed results: dataclasses that mirror the server's JSON.

Each field is the JSON key of the same name; bytes where the JSON has
base64 (images, files). ``raw`` keeps the whole object as the server sent
it, fields this client does not know among them.
"""

import base64
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


def _b64(s: Any) -> bytes:
    return base64.b64decode(s) if isinstance(s, str) else b""


@dataclass
class Image:
    """One matplotlib figure: ``type`` is "png", ``data`` its bytes."""

    type: str
    data: bytes

    def save(self, path: str) -> None:
        with open(path, "wb") as f:
            f.write(self.data)


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
    the cell's last expression; ``error`` the exception it raised."""

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
        return _fill(cls, doc, error=error, images=_images(doc))


@dataclass
class SessionInfo:
    """A session as the server describes it (creation, GET)."""

    session_id: str = ""
    profile: str = ""
    alive: bool = True
    busy: bool = False
    execution_count: int = 0
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
