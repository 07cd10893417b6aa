"""The asyncio client: Client's twin, over asyncio.open_unix_connection."""

from typing import Any, Callable, List, Mapping, Optional, Sequence, Union

from . import _api, _http
from .client import OnError, OnResult
from .results import ExecResult, FileEntry, RestartResult, RunResult, SessionEnd, SessionInfo

Output = Optional[Callable[[str], None]]


class AsyncClient:
    """Client, with every request a coroutine. ``async with
    client.session() as s`` closes the session."""

    def __init__(self, socket: Optional[str] = None, timeout: Optional[float] = None, *,
                 url: Optional[str] = None, token: Optional[str] = None, ca_file: Optional[str] = None):
        self.endpoint = _api.endpoint(socket, url, token, ca_file)
        # The socket's path; None for a gateway (then .url).
        self.socket = self.endpoint if isinstance(self.endpoint, str) else None
        self.url = None if isinstance(self.endpoint, str) else self.endpoint.url
        self.timeout = timeout

    async def _do(self, call: _api.Call, on_line=None) -> Any:
        answer = await _http.arequest(self.endpoint, call.method, call.target, call.body, call.content_type,
                                      call.stream, on_line, self.timeout)
        return call.finish(answer)

    async def run(self, code: str, files: Optional[_api.Files] = None, stdin: Union[None, str, bytes] = None,
                  limits: Optional[Mapping[str, Any]] = None, on_stdout: Output = None, on_stderr: Output = None,
                  profile: Optional[str] = None) -> RunResult:
        handler = _api.output_handler(on_stdout, on_stderr)
        return await self._do(_api.run(code, files, stdin, limits, profile, stream=handler is not None), handler)

    def session(self, profile: Optional[str] = None, limits: Optional[Mapping[str, Any]] = None,
                idle_timeout: Union[None, float, str] = None, ttl: Union[None, float, str] = None,
                files: Optional[_api.Files] = None, env: Optional[Mapping[str, str]] = None) -> "AsyncSession":
        """A session, started when awaited or entered (``async with``)."""
        return AsyncSession(self, _api.create_session(profile, limits, idle_timeout, ttl, files, env))

    async def attach(self, session_id: str) -> "AsyncSession":
        """A session made earlier, by its id."""
        s = AsyncSession(self, _api.session_info(session_id))
        return await s.start()

    async def sessions(self) -> List[SessionInfo]:
        return await self._do(_api.list_sessions())

    async def health(self) -> dict:
        return await self._do(_api.health())


class AsyncFiles:
    def __init__(self, client: AsyncClient, session_id: str):
        self._client = client
        self._id = session_id

    async def read(self, path: str) -> bytes:
        return await self._client._do(_api.read_file(self._id, path))

    async def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return (await self.read(path)).decode(encoding)

    async def write(self, path: str, data: Union[bytes, str]) -> None:
        await self._client._do(_api.write_file(self._id, path, data))

    async def delete(self, path: str) -> None:
        await self._client._do(_api.delete_file(self._id, path))

    async def list(self, path: str = "") -> List[FileEntry]:
        return await self._client._do(_api.list_files(self._id, path))


class AsyncSession:
    def __init__(self, client: AsyncClient, create: _api.Call):
        self._client = client
        self._create = create
        self.info: Optional[SessionInfo] = None
        self.id = ""
        self.files: Optional[AsyncFiles] = None
        self.end: Optional[SessionEnd] = None

    async def start(self) -> "AsyncSession":
        if self.info is None:
            self.info = await self._client._do(self._create)
            self.id = self.info.session_id
            self.files = AsyncFiles(self._client, self.id)
        return self

    def __await__(self):
        return self.start().__await__()

    async def run(self, code: str, stdin: Union[None, str, bytes] = None, timeout: Union[None, float, str] = None,
                  files: Optional[_api.Files] = None, on_stdout: Output = None, on_stderr: Output = None,
                  on_result: OnResult = None, on_error: OnError = None, env: Optional[Mapping[str, str]] = None,
                  figure_formats: Optional[Sequence[str]] = None) -> ExecResult:
        handler = _api.output_handler(on_stdout, on_stderr)
        call = _api.exec_(self.id, code, stdin, timeout, files, handler is not None, env, figure_formats)
        res = await self._client._do(call, handler)
        return _api.deliver(res, on_result, on_error)

    async def set_timeout(self, ttl: _api.Duration) -> SessionInfo:
        """The session now ends ttl from now; its SessionInfo after."""
        self.info = await self._client._do(_api.set_timeout(self.id, ttl))
        return self.info

    async def restart(self) -> RestartResult:
        """A fresh interpreter, /work kept; see Session.restart."""
        return await self._client._do(_api.restart(self.id))

    async def interrupt(self) -> None:
        await self._client._do(_api.interrupt(self.id))

    async def refresh(self) -> SessionInfo:
        self.info = await self._client._do(_api.session_info(self.id))
        return self.info

    async def close(self) -> SessionEnd:
        if self.end is None:
            self.end = await self._client._do(_api.close_session(self.id))
        return self.end

    async def __aenter__(self) -> "AsyncSession":
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        if self.info is not None:
            await self.close()
