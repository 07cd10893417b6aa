"""on_result and on_error (E2B's run_code callbacks), in both clients:
on_result once per result the exec returns, in order, with the Result
itself; on_error once with the exception, only when the cell raised."""

import asyncio
import base64

import pytest

import stockade
from conftest import has_module


def recorder():
    calls = []
    return calls, (lambda r: calls.append(("result", r))), (lambda e: calls.append(("error", e)))


def test_on_result_once_with_the_last_expression(client, has_sessions):
    with client.session() as s:
        calls, on_result, on_error = recorder()
        r = s.run("x = 6\nx * 7", on_result=on_result, on_error=on_error)
        assert r.ok and r.result == "42"
        assert [k for k, _ in calls] == ["result"]
        got = calls[0][1]
        assert isinstance(got, stockade.Result) and got is r.results[0]
        assert got.text == "42" and got.is_main_result and got.formats() == ["text"]

        # A cell with no value: no result, no error.
        calls.clear()
        r = s.run("y = 1", on_result=on_result, on_error=on_error)
        assert r.ok and calls == [] and r.results == []


def test_on_error_once_when_the_cell_raised(client, has_sessions):
    with client.session() as s:
        calls, on_result, on_error = recorder()
        r = s.run("print('before')\n{}['missing']", on_result=on_result, on_error=on_error,
                  on_stdout=lambda t: calls.append(("stdout", t)))
        assert r.verdict == "exception" and r.state == "kept"
        assert [k for k, _ in calls if k != "stdout"] == ["error"]
        err = calls[-1][1]
        assert isinstance(err, stockade.ExecError) and err is r.error
        assert err.name == "KeyError" and "missing" in err.value
        assert "".join(t for k, t in calls if k == "stdout") == "before\n"


@pytest.mark.skipif(not has_module("matplotlib"), reason="needs Debian's python3-matplotlib")
def test_on_result_for_each_figure_after_the_value(client, has_sessions):
    with client.session() as s:
        calls, on_result, on_error = recorder()
        r = s.run("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.figure()\nplt.plot([2, 1])\n'two'",
                  on_result=on_result, on_error=on_error)
        assert r.ok, r.stderr
        got = [v for _, v in calls]
        assert [k for k, _ in calls] == ["result"] * 3
        assert got[0].text == "'two'" and got[0].is_main_result
        for fig, img in zip(got[1:], r.images):
            assert not fig.is_main_result and "png" in fig.formats()
            assert fig.png == img.data and fig.png.startswith(b"\x89PNG\r\n\x1a\n")


def test_async_on_result_and_on_error(server, has_sessions):
    async def main():
        calls, on_result, on_error = recorder()
        async with stockade.AsyncClient(server.socket).session() as s:
            ok = await s.run("21 * 2", on_result=on_result, on_error=on_error)
            bad = await s.run("1/0", on_result=on_result, on_error=on_error)
        return calls, ok, bad

    calls, ok, bad = asyncio.run(main())
    assert [k for k, _ in calls] == ["result", "error"]
    assert calls[0][1].text == "42" and calls[0][1] is ok.results[0]
    assert calls[1][1] is bad.error and bad.error.name == "ZeroDivisionError"


def test_results_take_a_servers_bundles_as_sent():
    """When the server sends its results as MIME bundles (a DataFrame's
    text and HTML, display() mid-cell), they come through as sent, the
    binary formats as bytes: on_result needs no change for them."""
    png = b"\x89PNG\r\n\x1a\nxyz"
    doc = {"verdict": "ok", "result": "df", "results": [
        {"data": {"text/plain": "   a\n0  1", "text/html": "<table></table>"}, "is_main_result": False},
        {"image/png": base64.b64encode(png).decode(), "text/plain": "<Figure>"},
        {"text": "df", "json": {"a": [1]}, "is_main_result": True},
    ]}
    r = stockade.ExecResult.from_json(doc)
    assert [x.formats() for x in r.results] == [["text", "html"], ["png", "text"], ["text", "json"]]
    assert r.results[0].html == "<table></table>" and not r.results[0].is_main_result
    assert r.results[1].png == png
    assert r.results[2].json == {"a": [1]} and r.results[2].is_main_result
    calls, on_result, on_error = recorder()
    stockade._api.deliver(r, on_result, on_error)
    assert [v for _, v in calls] == r.results


def test_results_from_a_hostile_bundle_never_raise():
    """A cell can forge its results; a server that passes a binary
    format's value unchecked must not cost the caller the exec's answer
    (binascii.Error from session.run): the bad format is left out, the
    rest of the bundle and the answer kept."""
    pdf = b"%PDF-1.4\n"
    doc = {"verdict": "ok", "result": "1", "images": [{"type": "png", "data": "abc"}], "results": [
        {"data": {"text/plain": "x", "application/pdf": "abc", "image/png": "!!", "image/jpeg": "\u00e9", "text/html": "<b>"}},
        {"data": {"text/plain": "y", "application/pdf": base64.b64encode(pdf).decode()}},
    ]}
    r = stockade.ExecResult.from_json(doc)
    assert r.results[0].data == {"text/plain": "x", "text/html": "<b>"}
    assert r.results[1].pdf == pdf and r.results[1].text == "y"
    assert r.images[0].data == b""
