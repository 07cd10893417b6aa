"""HTTP/1.1 over the server's unix socket, or over HTTPS to a gateway:
http.client for the blocking client, asyncio streams for the async one.
One connection per request: a unix socket's connect costs microseconds,
and nothing is shared between threads or tasks."""

import asyncio
import errno
import http.client
import json
import os
import socket
import ssl
import stat
import urllib.parse
from typing import Any, Callable, Dict, Optional, Tuple, Union

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


class Remote:
    """A gateway: ``stockade gateway`` at an https:// URL, with a bearer
    token. Only https: a token sent over plain http would be anyone's on
    the path, so an http:// URL is refused here, before any connection.
    The server's certificate is verified against ``ca_file`` (else the
    system's CAs) and its name; TLS 1.2 at least."""

    def __init__(self, url: str, token: Optional[str], ca_file: Optional[str] = None):
        u = urllib.parse.urlsplit(url)
        if u.scheme != "https":
            raise ValueError(f"url {url!r}: only https:// (a token must never go over plain http)")
        if not u.hostname:
            raise ValueError(f"url {url!r}: no host")
        if u.path not in ("", "/") or u.query or u.fragment or u.username or u.password:
            raise ValueError(f"url {url!r}: give the gateway's address only, as https://HOST[:PORT]")
        if token is not None and (not token or any(not (0x21 <= ord(c) <= 0x7E) for c in token)):
            raise ValueError("token: printable ASCII without spaces (as the tenants file holds it)")
        self.url = url
        self.host = u.hostname
        self.port = u.port or 443
        self.token = token
        self.context = ssl.create_default_context(cafile=ca_file)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        # The host header names the gateway (brackets kept for IPv6).
        self.netloc = u.netloc

    def __repr__(self) -> str:
        # Never the token: a repr ends up in logs and tracebacks.
        return f"Remote({self.url!r})"

    def headers(self) -> Dict[str, str]:
        h = {"Host": self.netloc}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        return h


# Where a client sends its requests: a unix socket's path, or a gateway.
Endpoint = Union[str, Remote]


def remote_error(remote: Remote, err: OSError) -> ConnectError:
    """Says which gateway, and whether TLS or the network refused."""
    if isinstance(err, ssl.SSLCertVerificationError):
        return ConnectError(remote.url, f"TLS: the gateway's certificate did not verify ({err.verify_message}; see ca_file)", True)
    if isinstance(err, ssl.SSLError):
        return ConnectError(remote.url, f"TLS: {err.reason or err}", True)
    if isinstance(err, ConnectionRefusedError):
        return ConnectError(remote.url, "connection refused", False)
    return ConnectError(remote.url, os.strerror(err.errno) if err.errno else str(err), False)


class _RemoteConnection(http.client.HTTPSConnection):
    def __init__(self, remote: Remote, timeout: Optional[float]):
        super().__init__(remote.host, remote.port, timeout=timeout, context=remote.context)
        self._remote = remote

    def connect(self) -> None:
        try:
            super().connect()
        except OSError as e:
            raise remote_error(self._remote, e) from e


def _connection(where: Endpoint, timeout: Optional[float]) -> http.client.HTTPConnection:
    if isinstance(where, Remote):
        return _RemoteConnection(where, timeout)
    return _UnixConnection(where, timeout)


def _headers(where: Endpoint) -> Dict[str, str]:
    return where.headers() if isinstance(where, Remote) else {"Host": "stockade"}


# A piece of a body read at once: small enough that the bound is checked
# often, large enough that a big answer costs few reads.
PIECE = 1 << 16

# The longest status or header line and the most header lines read, as
# http.client allows (its _MAXLINE and _MAXHEADERS): a server that sends
# headers without end must not grow this client's memory.
MAX_HEADER_LINE = 1 << 16
MAX_HEADERS = 100


def _result_line(line: bytes, on_line: Optional[LineHandler]) -> Optional[bytes]:
    """One NDJSON line: output goes to on_line, the result is returned."""
    if not line.strip():
        return None
    try:
        doc = json.loads(line)
    except ValueError as e:
        raise ProtocolError(f"a stream line that is not JSON: {line[:200]!r}") from e
    if not isinstance(doc, dict):
        raise ProtocolError(f"a stream line that is not a JSON object: {line[:200]!r}")
    if doc.get("type") == "result":
        return line
    if on_line is not None:
        on_line(doc)
    return None


class Answer:
    """What both clients keep of an answer's body, with one bound: at most
    MAX_ANSWER bytes held, checked before each read (want() never asks for
    more than one byte past it) rather than after a read the server sized.
    A plain body is held whole; an NDJSON stream one line at a time, each
    output line handed to on_line as it completes. The server is trusted
    with none of it: a chunk header, a Content-Length or a line without
    end makes this raise ProtocolError, never hold more.

    The body grows in one bytearray (appending is amortized linear; joining
    bytes objects copies everything so far on every piece), and a line's
    end is searched for in the new bytes only."""

    def __init__(self, what: str, ndjson: bool, on_line: Optional[LineHandler], length: Optional[int]):
        self.what = what
        self.ndjson = ndjson
        self.on_line = on_line
        # Read here, not as a default argument: a test lowers it.
        self.cap = MAX_ANSWER
        if not ndjson and length is not None and length > self.cap:
            raise ProtocolError(f"{what}: an answer of {length} bytes, larger than {self.cap}")
        self.buf = bytearray()
        self.result: Optional[bytes] = None
        # Bytes searched for a line's end: the search is linear in what
        # came (a test holds it to that).
        self.scanned = 0

    def want(self) -> int:
        """How many bytes to read next."""
        return max(1, min(PIECE, self.cap + 1 - len(self.buf)))

    def feed(self, piece: bytes) -> bool:
        """Takes a piece of the body; True once a stream's result came."""
        start = len(self.buf)
        self.buf += piece
        while self.ndjson:
            i = self.buf.find(b"\n", start)
            self.scanned += (len(self.buf) if i < 0 else i + 1) - start
            if i < 0:
                break
            line = bytes(self.buf[:i])
            del self.buf[:i + 1]
            start = 0
            res = _result_line(line, self.on_line)
            if res is not None:
                self.result = res
                return True
        if len(self.buf) > self.cap:
            kind = "a stream line" if self.ndjson else "an answer"
            raise ProtocolError(f"{self.what}: {kind} larger than {self.cap} bytes")
        return False

    def end(self) -> bytes:
        """At the body's end: a stream's result (its last line, maybe
        without a newline) or the whole body."""
        if not self.ndjson:
            return bytes(self.buf)
        res = _result_line(bytes(self.buf), self.on_line)
        if res is None:
            raise ProtocolError(f"{self.what}: the stream ended without a result")
        return res


def _length(hdrs: Dict[str, str]) -> Optional[int]:
    n = hdrs.get("content-length")
    return int(n) if n is not None and n.isdigit() else None


def request(
    where: Endpoint,
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
    what = f"{method} {target}"
    conn = _connection(where, timeout)
    try:
        headers = _headers(where)
        if content_type:
            headers["Content-Type"] = content_type
        if stream:
            headers["Accept"] = NDJSON
        try:
            conn.request(method, target, body=body, headers=headers)
            resp = conn.getresponse()
        except (ConnectionError, http.client.HTTPException, socket.timeout, ssl.SSLError) as e:
            raise ProtocolError(f"{what}: {e}") from e
        hdrs = {k.lower(): v for k, v in resp.getheaders()}
        answer = Answer(what, hdrs.get("content-type", "").startswith(NDJSON), on_line, _length(hdrs))
        while True:
            # http.client takes the chunks apart; read1 returns what one
            # read brings, so output is handed on as it comes. (The
            # callbacks run outside the try: their errors are theirs.)
            try:
                piece = resp.read1(answer.want())
            except (ConnectionError, http.client.HTTPException, socket.timeout, ssl.SSLError) as e:
                raise ProtocolError(f"{what}: {e}") from e
            if not piece:
                return resp.status, hdrs, answer.end()
            if answer.feed(piece):
                return resp.status, hdrs, answer.result
    finally:
        conn.close()


async def arequest(
    where: Endpoint,
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
        return await _arequest(where, method, target, body, content_type, stream, on_line)
    return await asyncio.wait_for(_arequest(where, method, target, body, content_type, stream, on_line), timeout)


async def _aconnect(where: Endpoint):
    if isinstance(where, Remote):
        try:
            return await asyncio.open_connection(where.host, where.port, ssl=where.context,
                                                 server_hostname=where.host, limit=MAX_HEADER_LINE)
        except OSError as e:
            raise remote_error(where, e) from e
    try:
        return await asyncio.open_unix_connection(where, limit=MAX_HEADER_LINE)
    except OSError as e:
        raise connect_error(where, e) from e


async def _arequest(where, method, target, body, content_type, stream, on_line):
    what = f"{method} {target}"
    reader, writer = await _aconnect(where)
    try:
        try:
            status, hdrs = await _ahead(reader, writer, what, _headers(where), method, target, body, content_type, stream)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError) as e:
            raise ProtocolError(f"{what}: {e}") from e
        answer = Answer(what, hdrs.get("content-type", "").startswith(NDJSON), on_line, _length(hdrs))
        pieces = _Body(reader, hdrs)
        while True:
            # As in request: only the reads' errors are the answer's.
            try:
                piece = await pieces.read1(answer.want())
            except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError) as e:
                raise ProtocolError(f"{what}: {e}") from e
            if not piece:
                return status, hdrs, answer.end()
            if answer.feed(piece):
                return status, hdrs, answer.result
    finally:
        writer.close()
        try:
            await writer.wait_closed()
        except OSError:
            pass


async def _ahead(reader, writer, what, headers, method, target, body, content_type, stream) -> Tuple[int, Dict[str, str]]:
    """Sends the request; reads the answer's status and headers, no more
    of them than http.client takes."""
    body = body or b""
    head = [f"{method} {target} HTTP/1.1", *(f"{k}: {v}" for k, v in headers.items()), "Connection: close",
            f"Content-Length: {len(body)}"]
    if content_type:
        head.append(f"Content-Type: {content_type}")
    if stream:
        head.append(f"Accept: {NDJSON}")
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
    await writer.drain()
    status_line = await _line(reader)
    parts = status_line.decode("latin-1").split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise ProtocolError(f"{what}: not an HTTP answer: {status_line[:100]!r}")
    hdrs: Dict[str, str] = {}
    for _ in range(MAX_HEADERS + 1):
        line = await _line(reader)
        if line in (b"\r\n", b"\n", b""):
            return int(parts[1]), hdrs
        k, _, v = line.decode("latin-1").partition(":")
        hdrs[k.strip().lower()] = v.strip()
    raise ProtocolError(f"{what}: more than {MAX_HEADERS} header lines")


async def _line(reader: asyncio.StreamReader) -> bytes:
    """A status, header or chunk-size line, at most MAX_HEADER_LINE bytes
    (the reader's limit; over it, readline raises ValueError)."""
    try:
        return await reader.readline()
    except ValueError as e:
        raise ProtocolError(f"a line longer than {MAX_HEADER_LINE} bytes in the answer's head") from e


class _Body:
    """An answer's body, as it arrives: chunked, by Content-Length, or to
    the end of the connection. read1(n) returns at most n bytes, whatever a
    chunk header or a Content-Length announces: the caller's bound holds
    before the bytes are read."""

    def __init__(self, reader: asyncio.StreamReader, hdrs: Dict[str, str]):
        self.reader = reader
        self.chunked = "chunked" in hdrs.get("transfer-encoding", "").lower()
        # Bytes left: of the current chunk (chunked), of the body (by
        # length), or None: to the end of the connection.
        self.left = 0 if self.chunked else _length(hdrs)
        self.done = False

    async def read1(self, n: int) -> bytes:
        if self.done:
            return b""
        if self.chunked and self.left == 0:
            size_line = await _line(self.reader)
            try:
                size = int(size_line.split(b";")[0].strip(), 16)
            except ValueError as e:
                raise ProtocolError(f"bad chunk size {size_line[:40]!r}") from e
            if size < 0:
                raise ProtocolError(f"bad chunk size {size_line[:40]!r}")
            if size == 0:
                # Trailers, then the blank line: no more of them than of
                # headers.
                for _ in range(MAX_HEADERS + 1):
                    if (await _line(self.reader)) in (b"\r\n", b"\n", b""):
                        break
                else:
                    raise ProtocolError(f"more than {MAX_HEADERS} trailer lines")
                self.done = True
                return b""
            self.left = size
        if self.left is None:
            return await self.reader.read(n)
        if self.left == 0:
            self.done = True
            return b""
        piece = await self.reader.read(min(n, self.left))
        if not piece:
            raise ProtocolError(f"the answer ended {self.left} bytes short")
        self.left -= len(piece)
        if self.chunked and self.left == 0:
            await _line(self.reader)  # the CRLF after the chunk's data
        return piece
