"""The asyncio client against a real stockade serve: the blocking client's
behaviour, over asyncio.open_unix_connection."""

import asyncio

import pytest

import stockade


def run(coro):
    return asyncio.run(coro)


def test_async_run(server):
    async def main():
        c = stockade.AsyncClient(server.socket)
        seen = []
        r, bad = await asyncio.gather(
            c.run("import sys\nprint('x' * 100000)\nprint('e', file=sys.stderr)", on_stderr=seen.append),
            c.run("1/0"),
        )
        return r, bad, seen

    r, bad, seen = run(main())
    assert r.ok and r.stdout == "x" * 100000 + "\n" and "".join(seen) == "e\n"
    assert bad.verdict == "exit" and "ZeroDivisionError" in bad.stderr


def test_async_refusal_and_connect_error(server, tmp_path):
    async def main():
        with pytest.raises(stockade.APIError) as e:
            await stockade.AsyncClient(server.socket).run("1", limits={"pids": 100000})
        assert e.value.status == 422 and "ceiling" in e.value.message
        with pytest.raises(stockade.ConnectError) as e:
            await stockade.AsyncClient(str(tmp_path / "no.sock")).health()
        assert e.value.server_running is False

    run(main())


def test_async_session(server, has_sessions):
    async def main():
        c = stockade.AsyncClient(server.socket)
        async with c.session() as s:
            await s.run("import math\nr = 3")
            res = await s.run("round(math.pi * r ** 2, 2)")
            await s.files.write("a/b.txt", "hello")
            data = await s.files.read("a/b.txt")
            entries = await s.files.list("a")
            again = await c.attach(s.id)
            out = []
            streamed = await again.run("print(r)", on_stdout=out.append)
        return res, data, entries, streamed, out, s.end

    res, data, entries, streamed, out, end = run(main())
    assert res.ok and res.result == "28.27"
    assert data == b"hello" and [e.name for e in entries] == ["b.txt"]
    # print writes "3" and "\n" as it likes: one chunk or two, each as written
    assert streamed.ok and "".join(out) == "3\n"
    assert end.verdict == "closed"
