"""What the clients put on the wire for the session calls that take
durations and lists, without a server: the server parses what these send
(the tests against a real serve prove that), and here each form a caller
may pass is checked to become the one the API names."""

import json
from datetime import timedelta

import pytest

from stockade import _api


def body(call):
    return json.loads(call.body)


def test_set_timeout_takes_a_str_seconds_or_a_timedelta():
    assert body(_api.set_timeout("s1", "30m")) == {"ttl": "30m"}
    assert body(_api.set_timeout("s1", 90)) == {"ttl": "90000ms"}
    assert body(_api.set_timeout("s1", 0.25)) == {"ttl": "250ms"}
    assert body(_api.set_timeout("s1", timedelta(hours=2))) == {"ttl": "7200000ms"}
    call = _api.set_timeout("a/b", "1m")
    assert (call.method, call.target) == ("POST", "/v1/sessions/a%2Fb/ttl")
    for bad in (None, True, [1], {"m": 1}):
        with pytest.raises(TypeError):
            _api.set_timeout("s1", bad)


def test_restart_posts_no_body():
    call = _api.restart("s1")
    assert (call.method, call.target, call.body, call.ok) == ("POST", "/v1/sessions/s1/restart", b"", (200,))


def test_exec_env_and_figure_formats():
    doc = body(_api.exec_("s1", "1", env={"A": "1"}, figure_formats=["png", "svg"]))
    assert doc == {"code": "1", "env": {"A": "1"}, "figure_formats": ["png", "svg"]}
    # A lone str is one format, not its letters.
    assert body(_api.exec_("s1", "1", figure_formats="svg"))["figure_formats"] == ["svg"]
    assert body(_api.exec_("s1", "1", figure_formats=("svg",)))["figure_formats"] == ["svg"]
    assert body(_api.exec_("s1", "1")) == {"code": "1"}
