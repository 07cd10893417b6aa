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


def test_async_set_timeout_restart_env_figure_formats(server, has_sessions):
    async def main():
        c = stockade.AsyncClient(server.socket)
        async with c.session(ttl="10m", env={"MODE": "session"}) as s:
            before = s.info.expires_at
            moved = await s.set_timeout("30m")
            with pytest.raises(stockade.APIError) as refused:
                await s.set_timeout("2h")
            await s.run("x = 1\nopen('kept.txt', 'w').write('yes')")
            restart = await s.restart()
            code = ("import os\n"
                    "[globals().get('x'), open('kept.txt').read(), os.environ.get('TOKEN'), os.environ['MODE']]")
            with_env = await s.run(code, env={"TOKEN": "t-1", "MODE": "cell"})
            without = await s.run(code)
            with pytest.raises(stockade.APIError) as bad_format:
                await s.run("1", figure_formats=["gif"])
        return s, before, moved, refused.value, restart, with_env, without, bad_format.value

    s, before, moved, refused, restart, with_env, without, bad_format = run(main())
    # Go's RFC 3339 stamps of one zone: a later end sorts after, to the second.
    assert moved.alive and s.info is moved and moved.expires_at[:19] > before[:19]
    assert refused.status == 422 and "--session-ttl" in refused.message
    assert isinstance(restart, stockade.RestartResult) and restart.restarted and restart.state == "fresh"
    assert restart.restarts == 1 and restart.session_id == s.id
    assert with_env.ok and with_env.result == "[None, 'yes', 't-1', 'cell']", with_env
    assert without.ok and without.result == "[None, 'yes', None, 'session']", without
    assert bad_format.status == 400 and "figure_formats" in bad_format.message
    assert s.end.verdict == "closed"
