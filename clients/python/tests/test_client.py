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
