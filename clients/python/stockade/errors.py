"""The exceptions of the stockade client.

A failed exec (an exception in the code, a timeout, memory) is a result,
never an exception: an agent hands it back to the model. These are for the
cases where there is no result: the server could not be reached, or it
refused the request.
"""

from typing import Optional


class StockadeError(Exception):
    """Base of every error this client raises."""


class ConnectError(StockadeError):
    """The server's socket could not be reached.

    ``path`` is the socket tried; ``server_running`` says what the socket
    file tells: False when nothing is there or nothing listens on it.
    """

    def __init__(self, path: str, reason: str, server_running: bool):
        self.path = path
        self.reason = reason
        self.server_running = server_running
        state = "the server is running" if server_running else "no stockade serve is running there"
        super().__init__(f"cannot connect to the stockade server at {path}: {reason} ({state})")


class APIError(StockadeError):
    """The server refused the request, or could not serve it.

    ``status`` is the HTTP status and ``message`` the server's reason.
    """

    def __init__(self, method: str, path: str, status: int, message: str):
        self.method = method
        self.path = path
        self.status = status
        self.message = message
        super().__init__(f"{method} {path}: {status} {message}")


class NotFoundError(APIError):
    """404: no such session (or it is another user's)."""


class BusyError(APIError):
    """409: the session is running another exec (or is idle, for interrupt)."""


class GoneError(APIError):
    """410: the session has ended; the message says why."""


class ProtocolError(StockadeError):
    """The server's answer could not be read as the API says it is."""


def for_status(method: str, path: str, status: int, message: str) -> APIError:
    cls = {404: NotFoundError, 409: BusyError, 410: GoneError}.get(status, APIError)
    return cls(method, path, status, message)


def refusal_message(body: bytes, reason: Optional[str]) -> str:
    """The server's {"error": ...}, or what the body says."""
    import json

    try:
        doc = json.loads(body)
        if isinstance(doc, dict) and isinstance(doc.get("error"), str):
            return doc["error"]
    except ValueError:
        pass
    text = body.decode("utf-8", "replace").strip()
    return text[:2000] or (reason or "")
