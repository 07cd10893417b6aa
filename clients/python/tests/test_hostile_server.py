"""The client against a hostile server: a unix socket server in the test
that answers with a chunk header, a Content-Length, a body or a stream line
far past the client's cap (MAX_ANSWER, lowered here to 1 MiB so that the
test moves little). Both clients must raise ProtocolError, and must not
have read past the cap: the server counts what it got the client to take
(sent bytes, the socket's buffers included) and stops at four times the
cap, so a client that reads without bound ends holding all of it."""

import asyncio
import socket
import threading

import pytest

import stockade
from stockade import _http

CAP = 1 << 20
# What the kernel's socket buffers hold besides what the client read: a
# unix stream socket's send and receive buffers are a few hundred KiB.
SLACK = 1 << 20
# A server that is never stopped by the client stops here, and closes.
LIMIT = 4 * CAP

HEAD = b"HTTP/1.1 200 OK\r\nConnection: close\r\n"


def chunked(first_size):
    """A chunked body whose one chunk announces first_size bytes."""
    return HEAD + b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % first_size


ATTACKS = {
    # A 400 MiB chunk: the async client read it whole before its check.
    "chunk-400M": (chunked(400 << 20), b"x"),
    # A Content-Length past the cap: refused before a byte of it is read.
    "length-400M": (HEAD + b"Content-Type: application/json\r\nContent-Length: 419430400\r\n\r\n", b"x"),
    # A body to the end of the connection, without end.
    "endless-body": (HEAD + b"Content-Type: application/json\r\n\r\n", b"x"),
    # A stream line without end.
    "endless-line": (HEAD + b"Content-Type: application/x-ndjson\r\n\r\n", b"x"),
    # A stream of output lines, then one line longer than the cap in a
    # single 400 MiB chunk: the async client took a long line whole
    # when its newline came in the same read.
    "long-line-chunk": (chunked(400 << 20).replace(b"application/json", b"application/x-ndjson")
                        + b'{"type":"stdout","data":"ok"}\n' * 10 + b'{"type":"result","pad":"', b"x"),
    # Header lines without end.
    "endless-headers": (HEAD, b"X-A: b\r\n"),
}


class HostileServer:
    """Accepts one connection, reads the request's head, sends prefix and
    then filler until the client stops reading or LIMIT is reached."""

    def __init__(self, path, prefix, filler):
        self.path = path
        self.prefix = prefix
        # About 64 KiB of filler per send.
        self.filler = filler * ((1 << 16) // len(filler)) if filler else b""
        self.sent = 0
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(1)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        conn, _ = self.listener.accept()
        with conn:
            conn.settimeout(30)
            head = b""
            while b"\r\n\r\n" not in head:
                got = conn.recv(4096)
                if not got:
                    return
                head += got
            try:
                conn.sendall(self.prefix)
                while self.filler and self.sent < LIMIT:
                    self.sent += conn.send(self.filler)
            except OSError:
                pass  # the client closed: it stopped reading

    def join(self):
        self.thread.join(60)
        self.listener.close()
        assert not self.thread.is_alive()


@pytest.fixture
def small_cap(monkeypatch):
    monkeypatch.setattr(_http, "MAX_ANSWER", CAP)


def call(kind, sock):
    """The request each client makes of the hostile server."""
    if kind == "sync":
        return stockade.Client(sock, timeout=30).health()
    return asyncio.run(stockade.AsyncClient(sock, timeout=30).health())


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_attack_answer_past_the_cap(attack, kind, small_cap, tmp_path):
    prefix, filler = ATTACKS[attack]
    srv = HostileServer(str(tmp_path / "hostile.sock"), prefix, filler)
    with pytest.raises(stockade.ProtocolError):
        call(kind, srv.path)
    srv.join()
    assert srv.sent <= CAP + SLACK, f"the client took {srv.sent} bytes of a {CAP}-byte cap"


def test_attack_long_stream_line(small_cap, tmp_path):
    """A streamed exec whose result line is longer than the cap, newline
    and all, in one piece: the async client accepted it."""
    line = b'{"type":"result","verdict":"ok","pad":"' + b"x" * (CAP + 10) + b'"}\n'
    prefix = HEAD + b"Content-Type: application/x-ndjson\r\nContent-Length: %d\r\n\r\n" % len(line) + line
    for kind in ("sync", "async"):
        srv = HostileServer(str(tmp_path / f"{kind}.sock"), prefix, b"")
        with pytest.raises(stockade.ProtocolError, match="larger than"):
            if kind == "sync":
                stockade.Client(srv.path, timeout=30).run("1", on_stdout=print)
            else:
                asyncio.run(stockade.AsyncClient(srv.path, timeout=30).run("1", on_stdout=print))
        srv.join()


def test_answer_search_for_line_ends_is_linear():
    """A long stream line arriving in small pieces is searched once for its
    end, not once per piece from its start (the async client's `buf +=
    piece; b"\\n" in buf` did that: quadratic in the line)."""
    seen = []
    a = _http.Answer("test", True, seen.append, None)
    pieces = [b'{"type":"stdout","data":"' + b"x" * 100] + [b"y" * 1000] * 500 + [b'"}\n{"type":"result"}\n']
    fed = 0
    for p in pieces:
        fed += len(p)
        if a.feed(p):
            break
    assert a.result == b'{"type":"result"}'
    assert len(seen) == 1 and len(seen[0]["data"]) == 100 + 500 * 1000
    assert a.scanned <= fed, f"searched {a.scanned} bytes for line ends in {fed}"


def test_answer_bounds_its_reads():
    """want() never asks past the cap: a server sizes nothing the client
    reads."""
    a = _http.Answer("test", False, None, None)
    assert a.want() == _http.PIECE
    a.cap = 10
    assert a.want() == 10 + 1
    a.feed(b"123456")
    assert a.want() == 5
    with pytest.raises(stockade.ProtocolError):
        a.feed(b"12345")
    with pytest.raises(stockade.ProtocolError, match="an answer of 11 bytes, larger than 10"):
        _http.MAX_ANSWER, saved = 10, _http.MAX_ANSWER
        try:
            _http.Answer("test", False, None, 11)
        finally:
            _http.MAX_ANSWER = saved


def test_a_callbacks_error_is_its_own(tmp_path):
    """An on_stdout that raises (here a ConnectionError of its own, say a
    broken pipe to a UI) gets its exception back, not a ProtocolError that
    blames the server."""
    lines = b'{"type":"stdout","data":"x"}\n{"type":"result","verdict":"ok"}\n'
    prefix = HEAD + b"Content-Type: application/x-ndjson\r\nContent-Length: %d\r\n\r\n" % len(lines) + lines

    def on_stdout(text):
        raise ConnectionResetError("the UI went away")

    for kind in ("sync", "async"):
        srv = HostileServer(str(tmp_path / f"{kind}.sock"), prefix, b"")
        with pytest.raises(ConnectionResetError, match="the UI went away"):
            if kind == "sync":
                stockade.Client(srv.path, timeout=30).run("1", on_stdout=on_stdout)
            else:
                asyncio.run(stockade.AsyncClient(srv.path, timeout=30).run("1", on_stdout=on_stdout))
        srv.join()
