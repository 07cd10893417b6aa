"""The blocking client against a real stockade serve."""

import socket
import threading
import time

import pytest

import stockade
from conftest import has_module


def test_run_ok(client):
    r = client.run("print(6 * 7)")
    assert isinstance(r, stockade.RunResult)
    assert r.ok and r.verdict == "ok" and r.exit_code == 0
    assert r.stdout == "42\n"
    assert r.limits["memory_bytes"] > 0
    assert r.raw["verdict"] == "ok"


def test_failed_run_is_a_result(client):
    r = client.run("1/0")
    assert not r.ok and r.verdict == "exit" and r.exit_code == 1
    assert "ZeroDivisionError" in r.stderr


def test_run_files_stdin_and_limits(client):
    r = client.run(
        "import sys\n"
        "data = open('in.bin', 'rb').read()\n"
        "open('out.txt', 'w').write(sys.stdin.read().upper() + str(len(data)))\n",
        files={"in.bin": b"\x00\x01\x02", "note.txt": "text"},
        stdin="abc",
        limits={"memory": "128M", "timeout": 5},
    )
    assert r.ok, r
    assert r.files["out.txt"] == b"ABC3"
    assert r.limits["memory_bytes"] == 128 << 20 and r.limits["timeout_ms"] == 5000


def test_run_streams_output(client):
    seen = []
    r = client.run("import sys, time\nprint('one', flush=True)\ntime.sleep(0.2)\nprint('two', file=sys.stderr)",
                   on_stdout=lambda s: seen.append(("out", s)), on_stderr=lambda s: seen.append(("err", s)))
    assert r.ok
    # Output comes as the program writes it: print's text and its newline
    # may be two lines of the stream.
    assert "".join(s for k, s in seen if k == "out") == "one\n"
    assert "".join(s for k, s in seen if k == "err") == "two\n"
    assert seen[0][0] == "out"
    assert r.stdout == "one\n"


def test_refusal_is_an_exception_naming_status_and_reason(client):
    with pytest.raises(stockade.APIError) as e:
        client.run("print(1)", limits={"memory": "64G"})
    assert e.value.status == 422
    assert "ceiling" in e.value.message and "422" in str(e.value)
    with pytest.raises(stockade.APIError) as e:
        client.run("print(1)", profile="no-such-profile")
    assert e.value.status == 400 and "no-such-profile" in e.value.message


@pytest.mark.skipif(not has_module("matplotlib"), reason="needs Debian's python3-matplotlib")
def test_run_returns_figures_as_png_bytes(client):
    r = client.run("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])")
    assert r.ok, r.stderr
    assert len(r.images) == 1 and r.images[0].type == "png"
    assert r.images[0].data.startswith(b"\x89PNG\r\n\x1a\n")


def test_connect_error_names_the_path_and_says_no_server(tmp_path):
    missing = str(tmp_path / "none.sock")
    with pytest.raises(stockade.ConnectError) as e:
        stockade.Client(missing).run("print(1)")
    assert e.value.path == missing and missing in str(e.value)
    assert e.value.server_running is False and "no socket there" in str(e.value)

    # A socket file nothing listens on: a server that stopped.
    stale = str(tmp_path / "stale.sock")
    s = socket.socket(socket.AF_UNIX)
    s.bind(stale)
    s.close()
    with pytest.raises(stockade.ConnectError) as e:
        stockade.Client(stale).health()
    assert e.value.server_running is False and "nothing listens" in str(e.value)


def test_socket_argument_then_env_then_default(server, monkeypatch):
    monkeypatch.setenv("STOCKADE_SOCKET", server.socket)
    assert stockade.Client().socket == server.socket
    assert stockade.Client().health()["status"] == "ok"
    assert stockade.Client("/elsewhere.sock").socket == "/elsewhere.sock"
    monkeypatch.delenv("STOCKADE_SOCKET")
    assert stockade.Client().socket == stockade.DEFAULT_SOCKET == "/run/stockade/stockade.sock"


# Sessions.


def test_session_keeps_state(client, has_sessions):
    with client.session() as s:
        assert s.id and s.info.limits["memory_bytes"] > 0
        r = s.run("x = 1")
        assert r.ok and r.state == "kept" and r.result is None
        s.run("x += 1")
        r = s.run("x")
        assert r.ok and r.result == "2" and r.execution_count == 3
        assert r.session["alive"] is True
    assert s.end is not None and s.end.verdict == "closed" and s.end.execution_count == 3
    with pytest.raises((stockade.GoneError, stockade.NotFoundError)):
        s.run("x")


def test_session_exception_is_a_result(client, has_sessions):
    with client.session() as s:
        s.run("y = 5")
        r = s.run("def f():\n    return 1/0\nf()")
        assert r.verdict == "exception" and not r.ok and r.state == "kept"
        assert r.error.name == "ZeroDivisionError" and "division by zero" in r.error.value
        assert "f()" in r.error.traceback
        assert s.run("y").result == "5"


def test_session_files(client, has_sessions):
    with client.session(files={"seed.txt": "seed"}) as s:
        s.files.write("data/in.csv", "a,b\n1,2\n")
        s.files.write("blob.bin", b"\x00\xff")
        r = s.run("import os\nopen('data/out.txt', 'w').write(open('data/in.csv').read().upper())\nsorted(os.listdir('.'))")
        assert r.ok, r
        assert "seed.txt" in r.result and "blob.bin" in r.result
        assert "data/out.txt" in r.files_changed
        assert s.files.read("data/out.txt") == b"A,B\n1,2\n"
        assert s.files.read("/work/blob.bin") == b"\x00\xff"
        names = {e.name: e for e in s.files.list("data")}
        assert names["in.csv"].type == "file" and names["in.csv"].size == 8
        s.files.delete("blob.bin")
        assert "blob.bin" not in {e.name for e in s.files.list()}
        with pytest.raises(stockade.NotFoundError):
            s.files.read("nope.txt")


def test_session_streams_and_interrupts(client, has_sessions):
    with client.session() as s:
        s.run("n = 0")
        seen = []
        started = threading.Event()

        def out(text):
            seen.append(text)
            started.set()

        box = {}
        t = threading.Thread(target=lambda: box.setdefault("r", s.run(
            "import time\nprint('looping', flush=True)\nwhile True:\n    n += 1\n    time.sleep(0.01)", on_stdout=out)))
        t.start()
        assert started.wait(30), "no output streamed"
        s.interrupt()
        t.join(30)
        r = box["r"]
        assert r.verdict == "interrupted" and r.state == "kept", r
        assert "".join(seen).startswith("looping")
        assert int(s.run("n").result) > 0
        with pytest.raises(stockade.BusyError):
            s.interrupt()


def test_sessions_listed_and_refreshed(client, has_sessions):
    with client.session() as s:
        s.run("1")
        assert s.id in [i.session_id for i in client.sessions()]
        info = s.refresh()
        assert info.execution_count == 1 and info.alive and not info.busy
    assert s.id not in [i.session_id for i in client.sessions()]


def test_session_exec_timeout_keeps_state(client, has_sessions):
    with client.session() as s:
        s.run("z = 'kept'")
        t0 = time.monotonic()
        r = s.run("import time\ntime.sleep(30)", timeout=1)
        assert r.verdict == "timeout" and r.state == "kept", r
        assert time.monotonic() - t0 < 20
        assert s.run("z").result == "'kept'"


def test_attach_by_id(client, has_sessions):
    with client.session() as s:
        s.run("w = 7")
        again = client.attach(s.id)
        assert again.run("w * 6").result == "42"
    with pytest.raises(stockade.NotFoundError) as e:
        client.attach("0" * 32)
    assert e.value.status == 404


# Sessions, against E2B: set_timeout, restart, an exec's env, figure formats.


def _when(stamp):
    """An RFC 3339 time as Go writes it (nanoseconds, Z) in seconds."""
    from datetime import datetime

    head, _, frac = stamp.rstrip("Z").partition(".")
    frac, _, zone = frac.partition("+") if "+" in frac else (frac, "", "")
    return datetime.fromisoformat(head + ("+" + zone if zone else "+00:00")).timestamp() + float("0." + (frac or "0"))


def test_set_timeout_moves_the_end(client, has_sessions):
    from datetime import timedelta

    with client.session(ttl="10m") as s:
        start = _when(s.info.expires_at)
        info = s.set_timeout("30m")
        assert isinstance(info, stockade.SessionInfo) and info.alive and s.info is info
        # 30 minutes from now: 20 later than the 10 it was made with.
        assert 19 * 60 < _when(info.expires_at) - start < 21 * 60, (s.info.expires_at, info.expires_at)
        assert _when(s.set_timeout(timedelta(minutes=5)).expires_at) < start
        assert abs(_when(s.set_timeout(600).expires_at) - start) < 60
        assert _when(s.refresh().expires_at) == _when(s.info.expires_at)
        # Past --session-ttl (an hour, serve's default): refused, naming it.
        with pytest.raises(stockade.APIError) as e:
            s.set_timeout("2h")
        assert e.value.status == 422 and "--session-ttl" in e.value.message, e.value
        assert s.run("1").ok
    with pytest.raises((stockade.GoneError, stockade.NotFoundError)):
        s.set_timeout("5m")


def test_restart_keeps_work_and_drops_variables(client, has_sessions):
    with client.session(env={"KEPT": "yes"}) as s:
        r = s.run("x = 41\nopen('kept.txt', 'w').write('before')")
        assert r.ok, r
        res = s.restart()
        assert isinstance(res, stockade.RestartResult)
        assert res.restarted is True and res.state == "fresh" and res.why == "", res
        assert res.session_id == s.id and res.restarts == 1 and res.python.startswith("3.")
        assert res.session["alive"] is True
        r = s.run("import os\n[globals().get('x'), open('kept.txt').read(), os.environ.get('KEPT')]")
        assert r.ok and r.result == "[None, 'before', 'yes']", r
        assert r.execution_count == 2
        assert s.refresh().restarts == 1
    with pytest.raises((stockade.GoneError, stockade.NotFoundError)):
        s.restart()


def test_exec_env_is_the_cells_alone(client, has_sessions):
    with client.session(env={"MODE": "session"}) as s:
        code = "import os, subprocess, sys\n" \
               "[os.environ.get('TOKEN'), os.environ.get('MODE'), subprocess.run([sys.executable, '-c', " \
               "'import os; print(os.environ.get(\"TOKEN\"))'], capture_output=True, text=True).stdout.strip()]"
        r = s.run(code, env={"TOKEN": "t-1", "MODE": "cell"})
        assert r.ok and r.result == "['t-1', 'cell', 't-1']", r
        r = s.run(code)
        assert r.ok and r.result == "[None, 'session', 'None']", r
        # A name that would change how the jail's programs load: refused,
        # naming it, and the session runs on.
        with pytest.raises(stockade.APIError) as e:
            s.run("1", env={"LD_PRELOAD": "/work/x.so"})
        assert e.value.status == 400 and "LD_PRELOAD" in e.value.message, e.value
        assert s.run("2").result == "2"


def test_figure_formats_reach_the_server(client, has_sessions):
    with client.session() as s:
        assert s.run("1", figure_formats=["png", "svg"]).ok
        assert s.run("1", figure_formats="svg").ok
        with pytest.raises(stockade.APIError) as e:
            s.run("1", figure_formats=["gif"])
        assert e.value.status == 400 and "figure_formats" in e.value.message and "gif" in e.value.message


@pytest.mark.skipif(not has_module("matplotlib"), reason="needs Debian's python3-matplotlib")
def test_figure_formats_svg(client, has_sessions):
    with client.session() as s:
        r = s.run("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])", figure_formats=["svg"])
        assert r.ok, r
        figs = [x for x in r.results if not x.is_main_result]
        assert len(figs) == 1 and "image/svg+xml" in figs[0].data and "image/png" not in figs[0].data, figs
        assert figs[0].svg.lstrip().startswith("<") and "<svg" in figs[0].svg
        r = s.run("plt.plot([2, 1])", figure_formats=["png", "svg"])
        fig = [x for x in r.results if not x.is_main_result][0]
        assert fig.png.startswith(b"\x89PNG") and "<svg" in fig.svg
