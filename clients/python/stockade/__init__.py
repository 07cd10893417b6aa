"""Client of stockade serve: run model-written Python in jails.

    from stockade import Client
    with Client().session() as s:
        s.run("import math; x = 21")
        print(s.run("x * 2").result)    # 42

Standard library only (Python >= 3.9): HTTP/1.1 over the server's unix
socket. A failed exec is a result (its verdict says why); a refusal or an
unreachable server is an exception (errors.py).
"""

from ._api import DEFAULT_SOCKET
from .aio import AsyncClient, AsyncFiles, AsyncSession
from .client import Client, Files, Session
from .errors import APIError, BusyError, ConnectError, GoneError, NotFoundError, ProtocolError, StockadeError
from .results import ExecError, ExecResult, FileEntry, Image, RestartResult, Result, RunResult, SessionEnd, SessionInfo

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_SOCKET", "Client", "Session", "Files", "AsyncClient", "AsyncSession", "AsyncFiles",
    "RunResult", "ExecResult", "ExecError", "Image", "Result", "FileEntry", "SessionInfo", "SessionEnd",
    "RestartResult",
    "StockadeError", "ConnectError", "APIError", "NotFoundError", "BusyError", "GoneError", "ProtocolError",
]
