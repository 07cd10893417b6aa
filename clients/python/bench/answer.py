#!/usr/bin/env python3
"""How long each client takes to read a large answer: a local unix socket
server sends a SIZE-MiB JSON body (chunked, 64 KiB chunks, as serve sends a
large file) and a stream with one SIZE-MiB output line, and the blocking
and async clients read each. A benchmark, not a check: it prints seconds
and the client's CPU seconds (what a quadratic join costs, whatever the
load makes of the wall clock), and asserts only that the bytes came back
whole.

    python3 clients/python/bench/answer.py [SIZE_MIB]    (default 24)

Issue 28 measured 24 MiB at 47 s for the async client (each piece joined
onto the body so far: quadratic) against 3.9 s for the blocking one; both
now grow one bytearray and search only new bytes for a line's end.
"""

import asyncio
import os
import socket
import sys
import tempfile
import multiprocessing
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import stockade  # noqa: E402

PIECE = 1 << 16


def body(size):
    doc = b'{"pad":"' + b"x" * (size - 10) + b'"}'
    out = [b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"]
    for i in range(0, len(doc), PIECE):
        part = doc[i:i + PIECE]
        out.append(b"%x\r\n%s\r\n" % (len(part), part))
    out.append(b"0\r\n\r\n")
    return b"".join(out)


def stream(size):
    line = b'{"type":"stdout","data":"' + b"x" * size + b'"}\n{"type":"result","verdict":"ok"}\n'
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nContent-Length: %d\r\n\r\n%s" % (len(line), line)


def serve(ls, answer):
    """In a process of its own: a server thread in the client's process
    would take the GIL from the client it times."""
    while True:
        c, _ = ls.accept()
        with c:
            head = b""
            while b"\r\n\r\n" not in head:
                head += c.recv(4096)
            c.sendall(answer)


def main():
    size = int(sys.argv[1]) << 20 if len(sys.argv) > 1 else 24 << 20
    with tempfile.TemporaryDirectory(prefix="stockade-bench-") as d:
        for name, answer in (("chunked body", body(size)), ("one stream line", stream(size))):
            path = os.path.join(d, name.replace(" ", "-") + ".sock")
            ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            ls.bind(path)
            ls.listen(4)
            server = multiprocessing.get_context("fork").Process(target=serve, args=(ls, answer), daemon=True)
            server.start()
            ls.close()
            for kind in ("sync", "async"):
                got = []
                t0, c0 = time.perf_counter(), time.process_time()
                if name == "chunked body":
                    if kind == "sync":
                        doc = stockade.Client(path).health()
                    else:
                        doc = asyncio.run(stockade.AsyncClient(path).health())
                    got.append(doc["pad"])
                else:
                    if kind == "sync":
                        r = stockade.Client(path).run("", on_stdout=got.append)
                    else:
                        r = asyncio.run(stockade.AsyncClient(path).run("", on_stdout=got.append))
                    assert r.verdict == "ok"
                dt, cpu = time.perf_counter() - t0, time.process_time() - c0
                assert sum(map(len, got)) >= size - 10, "short"
                print(f"{name:16s} {kind:5s} {size >> 20} MiB: {dt:6.2f} s, client CPU {cpu:6.2f} s  ({size / cpu / (1 << 20):6.1f} MiB per CPU second)")
            server.terminate()
            server.join()


if __name__ == "__main__":
    main()
