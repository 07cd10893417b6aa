"""The client over HTTPS to a gateway, against a real TLS server in the
test (http.server wrapped in ssl, its certificates made by openssl): the
token goes in the Authorization header and nowhere else, a server whose
certificate another CA signed is refused before anything is sent, and an
http:// url is refused before any connection, so that a token never
travels in the clear."""

import asyncio
import http.server
import json
import os
import shutil
import socket
import ssl
import subprocess
import threading

import pytest

import stockade

TOKEN = "t0k3n-" + "x" * 40


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _ca(d, name):
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.crt", "-subj", f"/CN={name}", "-days", "1",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign", cwd=d)
    return os.path.join(d, f"{name}.crt")


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.skip("openssl makes the test's certificates")
    d = str(tmp_path_factory.mktemp("tls"))
    ca = _ca(d, "ca")
    other = _ca(d, "other")
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", "srv.key", "-out", "srv.csr", "-subj", "/CN=localhost", cwd=d)
    with open(os.path.join(d, "ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    _openssl("x509", "-req", "-in", "srv.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "srv.crt", "-days", "1", "-extfile", "ext", cwd=d)
    return {"ca": ca, "other": other, "cert": os.path.join(d, "srv.crt"), "key": os.path.join(d, "srv.key")}


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.server.seen.append((self.path, self.headers.get("Authorization"), self.headers.get("Host")))
        body = {"/v1/health": {"ok": True}, "/v1/sessions": {"sessions": []}}.get(self.path, {"error": "no"})
        data = json.dumps(body).encode()
        self.send_response(200 if self.path in ("/v1/health", "/v1/sessions") else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


class _Server:
    """An HTTP server on loopback, TLS when given a certificate; it counts
    the connections it accepted, so a test can say none came."""

    def __init__(self, certs=None):
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.seen = []
        # A handshake the client refuses is the test's point, not news.
        self.httpd.handle_error = lambda request, address: None
        self.connections = 0
        if certs is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(certs["cert"], certs["key"])
            self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True, do_handshake_on_connect=False)
        accept = self.httpd.get_request

        def counted():
            conn = accept()
            self.connections += 1
            return conn

        self.httpd.get_request = counted
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def seen(self):
        return self.httpd.seen

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(10)


@pytest.fixture
def tls_server(certs):
    s = _Server(certs)
    yield s
    s.close()


@pytest.fixture
def plain_server():
    s = _Server()
    yield s
    s.close()


def test_token_sent_over_https(certs, tls_server):
    c = stockade.Client(url=f"https://127.0.0.1:{tls_server.port}", token=TOKEN, ca_file=certs["ca"], timeout=20)
    assert c.health() == {"ok": True}
    assert c.sessions() == []
    assert tls_server.seen == [("/v1/health", "Bearer " + TOKEN, f"127.0.0.1:{tls_server.port}"),
                               ("/v1/sessions", "Bearer " + TOKEN, f"127.0.0.1:{tls_server.port}")]
    assert c.socket is None and c.url == f"https://127.0.0.1:{tls_server.port}"
    assert TOKEN not in repr(c.endpoint)


def test_async_token_sent_over_https(certs, tls_server):
    async def main():
        c = stockade.AsyncClient(url=f"https://localhost:{tls_server.port}", token=TOKEN, ca_file=certs["ca"], timeout=20)
        return await c.health(), await c.sessions()

    assert asyncio.run(main()) == ({"ok": True}, [])
    assert [s[1] for s in tls_server.seen] == ["Bearer " + TOKEN] * 2


def test_env_url_and_token(certs, tls_server, monkeypatch):
    monkeypatch.setenv("STOCKADE_URL", f"https://127.0.0.1:{tls_server.port}")
    monkeypatch.setenv("STOCKADE_TOKEN", TOKEN)
    monkeypatch.setenv("STOCKADE_SOCKET", "/nonexistent/s.sock")
    # The system's CAs do not know the test's: verified against ca_file.
    assert stockade.Client(ca_file=certs["ca"], timeout=20).health() == {"ok": True}
    assert tls_server.seen[-1][1] == "Bearer " + TOKEN
    # A socket given explicitly still wins over $STOCKADE_URL, and the
    # token stays home.
    assert stockade.Client("/nonexistent/s.sock").socket == "/nonexistent/s.sock"


def test_wrong_ca_refused(certs, tls_server):
    c = stockade.Client(url=f"https://127.0.0.1:{tls_server.port}", token=TOKEN, ca_file=certs["other"], timeout=20)
    with pytest.raises(stockade.ConnectError, match="did not verify"):
        c.health()

    async def main():
        a = stockade.AsyncClient(url=f"https://127.0.0.1:{tls_server.port}", token=TOKEN, ca_file=certs["other"], timeout=20)
        await a.health()

    with pytest.raises(stockade.ConnectError, match="did not verify"):
        asyncio.run(main())
    assert tls_server.seen == [], "a request was sent to a server whose certificate did not verify"


def test_wrong_name_refused(certs, tls_server):
    # The certificate is for 127.0.0.1 and localhost; reached by another
    # name it is refused, though its CA is trusted.
    name = socket.gethostname()
    if name in ("localhost", "127.0.0.1"):
        pytest.skip("the host's name is one the certificate has")
    c = stockade.Client(url=f"https://{name}:{tls_server.port}", token=TOKEN, ca_file=certs["ca"], timeout=20)
    with pytest.raises(stockade.ConnectError):
        c.health()
    assert tls_server.seen == []


@pytest.mark.parametrize("url", ["http://127.0.0.1:{port}", "HTTP://127.0.0.1:{port}", "127.0.0.1:{port}", "ws://127.0.0.1:{port}"])
def test_token_never_over_plain_http(plain_server, url, monkeypatch):
    url = url.format(port=plain_server.port)
    with pytest.raises(ValueError, match="https"):
        stockade.Client(url=url, token=TOKEN)
    with pytest.raises(ValueError, match="https"):
        stockade.AsyncClient(url=url, token=TOKEN)
    monkeypatch.setenv("STOCKADE_URL", url)
    monkeypatch.setenv("STOCKADE_TOKEN", TOKEN)
    with pytest.raises(ValueError, match="https"):
        stockade.Client()
    assert plain_server.connections == 0, "the client connected to a plain http server"


def test_bad_arguments():
    with pytest.raises(ValueError):
        stockade.Client("/run/s.sock", url="https://h")
    with pytest.raises(ValueError):
        stockade.Client("/run/s.sock", token=TOKEN)
    with pytest.raises(ValueError):
        stockade.Client(url="https://h", token="a token\r\nX-Injected: 1")
    with pytest.raises(ValueError):
        stockade.Client(url="https://h/v1?x=1", token=TOKEN)
