"""HTTP/1.1 over the server's unix socket: http.client for the blocking
client, asyncio streams for the async one. One connection per request: a
unix socket's connect costs microseconds, and nothing is shared between
threads or tasks."""

import asyncio
import errno
import http.client
import json
import os
import socket
import stat
from typing import Any, Callable, Dict, Optional, Tuple

from .errors import ConnectError, ProtocolError

NDJSON = "application/x-ndjson"

# The largest answer this client reads: the server's own caps (--files-max,
# output limits) keep real ones far below it.
MAX_ANSWER = 256 << 20

LineHandler = Callable[[Dict[str, Any]], None]


def connect_error(path: str, err: OSError) -> ConnectError:
    """Says which path, and what the socket file tells of the server."""
    try:
        is_socket = stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        is_socket = False
    if isinstance(err, FileNotFoundError) or err.errno == errno.ENOENT:
        return ConnectError(path, "no socket there", False)
    if isinstance(err, ConnectionRefusedError) or err.errno == errno.ECONNREFUSED:
        return ConnectError(path, "nothing listens on it (a socket left by a server that stopped)", False)
    if isinstance(err, PermissionError) or err.errno in (errno.EACCES, errno.EPERM):
        return ConnectError(path, "permission denied (the socket is mode 0660: be in its group, stockade serve --group)", is_socket)
    return ConnectError(path, os.strerror(err.errno) if err.errno else str(err), is_socket)


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: Optional[float]):
        super().__init__("stockade", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(self.timeout)
            s.connect(self._path)
        except OSError as e:
            s.close()
            raise connect_error(self._path, e) from e
        self.sock = s


def _result_line(line: bytes, on_line: Optional[LineHandler]) -> Optional[bytes]:
    """One NDJSON line: output goes to on_line, the result is returned."""
    if not line.strip():
        return None
    try:
        doc = json.loads(line)
    except ValueError as e:
        raise ProtocolError(f"a stream line that is not JSON: {line[:200]!r}") from e
    if doc.get("type") == "result":
        return line
    if on_line is not None:
        on_line(doc)
    return None


def request(
    path: str,
    method: str,
    target: str,
    body: Optional[bytes] = None,
    content_type: Optional[str] = None,
    stream: bool = False,
    on_line: Optional[LineHandler] = None,
    timeout: Optional[float] = None,
) -> Tuple[int, Dict[str, str], bytes]:
    """Sends one request; returns status, headers and body. A streamed
    answer's body is its result line; each output line goes to on_line."""
    conn = _UnixConnection(path, timeout)
    try:
        headers = {"Host": "stockade"}
        if content_type:
            headers["Content-Type"] = content_type
        if stream:
            headers["Accept"] = NDJSON
        try:
            conn.request(method, target, body=body, headers=headers)
            resp = conn.getresponse()
        except (ConnectionError, http.client.HTTPException, socket.timeout) as e:
            raise ProtocolError(f"{method} {target}: {e}") from e
        hdrs = {k.lower(): v for k, v in resp.getheaders()}
        if hdrs.get("content-type", "").startswith(NDJSON):
            while True:
                line = resp.readline(MAX_ANSWER)
                if not line:
                    raise ProtocolError(f"{method} {target}: the stream ended without a result")
                res = _result_line(line, on_line)
                if res is not None:
                    return resp.status, hdrs, res
        data = resp.read(MAX_ANSWER + 1)
        if len(data) > MAX_ANSWER:
            raise ProtocolError(f"{method} {target}: an answer larger than {MAX_ANSWER} bytes")
        return resp.status, hdrs, data
    finally:
        conn.close()


async def arequest(
    path: str,
    method: str,
    target: str,
    body: Optional[bytes] = None,
    content_type: Optional[str] = None,
    stream: bool = False,
    on_line: Optional[LineHandler] = None,
    timeout: Optional[float] = None,
) -> Tuple[int, Dict[str, str], bytes]:
    """request's twin on asyncio.open_unix_connection."""
    if timeout is None:
        return await _arequest(path, method, target, body, content_type, stream, on_line)
    return await asyncio.wait_for(_arequest(path, method, target, body, content_type, stream, on_line), timeout)


async def _arequest(path, method, target, body, content_type, stream, on_line):
    try:
        reader, writer = await asyncio.open_unix_connection(path, limit=1 << 20)
    except OSError as e:
        raise connect_error(path, e) from e
    try:
        body = body or b""
        head = [f"{method} {target} HTTP/1.1", "Host: stockade", "Connection: close", f"Content-Length: {len(body)}"]
        if content_type:
            head.append(f"Content-Type: {content_type}")
        if stream:
            head.append(f"Accept: {NDJSON}")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
        await writer.drain()
        status_line = await reader.readline()
        parts = status_line.decode("latin-1").split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise ProtocolError(f"{method} {target}: not an HTTP answer: {status_line[:100]!r}")
        status = int(parts[1])
        hdrs: Dict[str, str] = {}
        while True:
            line = await reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            k, _, v = line.decode("latin-1").partition(":")
            hdrs[k.strip().lower()] = v.strip()
        chunks = _Body(reader, hdrs)
        if hdrs.get("content-type", "").startswith(NDJSON):
            buf = b""
            async for piece in chunks:
                buf += piece
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    res = _result_line(line, on_line)
                    if res is not None:
                        return status, hdrs, res
                if len(buf) > MAX_ANSWER:
                    raise ProtocolError(f"{method} {target}: a stream line larger than {MAX_ANSWER} bytes")
            res = _result_line(buf, on_line)
            if res is None:
                raise ProtocolError(f"{method} {target}: the stream ended without a result")
            return status, hdrs, res
        data = b""
        async for piece in chunks:
            data += piece
            if len(data) > MAX_ANSWER:
                raise ProtocolError(f"{method} {target}: an answer larger than {MAX_ANSWER} bytes")
        return status, hdrs, data
    except (ConnectionError, asyncio.IncompleteReadError) as e:
        raise ProtocolError(f"{method} {target}: {e}") from e
    finally:
        writer.close()
        try:
            await writer.wait_closed()
        except OSError:
            pass


class _Body:
    """An answer's body, as it arrives: chunked, by Content-Length, or to
    the end of the connection."""

    def __init__(self, reader: asyncio.StreamReader, hdrs: Dict[str, str]):
        self.reader = reader
        self.chunked = "chunked" in hdrs.get("transfer-encoding", "").lower()
        n = hdrs.get("content-length")
        self.length = int(n) if n is not None and n.isdigit() else None

    def __aiter__(self):
        return self._pieces()

    async def _pieces(self):
        if self.chunked:
            while True:
                size_line = await self.reader.readline()
                try:
                    size = int(size_line.split(b";")[0].strip(), 16)
                except ValueError as e:
                    raise ProtocolError(f"bad chunk size {size_line[:40]!r}") from e
                if size == 0:
                    # Trailers, then the blank line.
                    while (await self.reader.readline()) not in (b"\r\n", b"\n", b""):
                        pass
                    return
                yield await self.reader.readexactly(size)
                await self.reader.readline()
        elif self.length is not None:
            left = self.length
            while left > 0:
                piece = await self.reader.read(min(left, 1 << 16))
                if not piece:
                    raise ProtocolError(f"the answer ended {left} bytes short")
                left -= len(piece)
                yield piece
        else:
            while True:
                piece = await self.reader.read(1 << 16)
                if not piece:
                    return
                yield piece
