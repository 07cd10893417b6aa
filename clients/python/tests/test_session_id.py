"""A session id is one path segment of the API, escaped by the client: an
id that carries '/', '?', '#' or '..' (a model's, a log's, another
process's word) names no session, and never reaches another route. Without
the escaping, "ID/files/x" read a file of session ID as its description,
"ID?x" closed session ID, and "../files/x" left the sessions' routes."""

import asyncio
import json

import pytest

import stockade
from stockade.results import SessionInfo


def hostile_ids(real):
    return [f"{real}/files/forged.json", f"{real}?a=b", f"{real}/exec", f"{real}#x",
            "../files/x", "a?b", f"../sessions/{real}", f"%2e%2e/{real}"]


def test_attack_hostile_session_id_reaches_no_other_route(client, has_sessions):
    with client.session() as s:
        s.files.write("forged.json", json.dumps({"session_id": "forged", "alive": True}))
        for hid in hostile_ids(s.id):
            with pytest.raises(stockade.NotFoundError):
                client.attach(hid)
            # A Session made with the id (as attach would have, had the
            # server answered): every route it takes stays its own.
            bad = stockade.Session(client, SessionInfo(session_id=hid))
            with pytest.raises(stockade.NotFoundError):
                bad.run("1")
            with pytest.raises(stockade.NotFoundError):
                bad.files.read("forged.json")
            with pytest.raises(stockade.NotFoundError):
                bad.close()
        # The real session heard none of it: alive, its state whole.
        r = s.run("41 + 1")
        assert r.ok and r.result == "42" and r.execution_count == 1, r


def test_attack_hostile_session_id_async(server, has_sessions):
    async def main():
        c = stockade.AsyncClient(server.socket)
        async with c.session() as s:
            await s.files.write("forged.json", json.dumps({"session_id": "forged", "alive": True}))
            for hid in hostile_ids(s.id):
                with pytest.raises(stockade.NotFoundError):
                    await c.attach(hid)
                bad = stockade.AsyncSession(c, stockade._api.session_info(hid))
                bad.id = hid
                with pytest.raises(stockade.NotFoundError):
                    await bad.close()
            return await s.run("41 + 1")

    r = asyncio.run(main())
    assert r.ok and r.result == "42" and r.execution_count == 1, r
