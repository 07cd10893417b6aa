"""A real `stockade serve` for the client's tests: the binary make build
made (STOCKADE_BIN), on a socket in a temporary directory, as root (the
jails need it). Without STOCKADE_BIN the tests that need a server skip;
`make check` sets it, and there a server that cannot start fails them."""

import os
import signal
import subprocess
import tempfile
import time

import pytest

import stockade


def _bin():
    b = os.environ.get("STOCKADE_BIN")
    if not b:
        pytest.skip("set STOCKADE_BIN to a stockade built by make build (make check does)")
    if os.geteuid() != 0:
        pytest.skip("stockade serve starts real jails: needs root")
    return os.path.abspath(b)


class Server:
    def __init__(self, binary, *args):
        self.dir = tempfile.mkdtemp(prefix="stockade-pytest-")
        os.chmod(self.dir, 0o755)
        self.socket = os.path.join(self.dir, "s.sock")
        self.log = open(os.path.join(self.dir, "log"), "w+")
        self.proc = subprocess.Popen([binary, "serve", "--socket", self.socket, "--audit-log", "", *args],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            try:
                stockade.Client(self.socket).health()
                return
            except stockade.StockadeError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    pytest.fail("stockade serve did not come up:\n" + self.logs())
                time.sleep(0.1)

    def logs(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("stockade serve did not stop within 30 s of SIGTERM:\n" + self.logs())
        assert "every jail, cgroup and run directory removed" in self.logs(), self.logs()


@pytest.fixture(scope="session")
def server():
    s = Server(_bin(), "--pool", "2")
    yield s
    s.stop()


@pytest.fixture
def client(server):
    return stockade.Client(server.socket)


@pytest.fixture
def has_sessions(client):
    """Skips while the server has no session routes (they came with issue
    19's sessions work; a server without them answers 404 "no such
    endpoint")."""
    try:
        client.sessions()
    except stockade.NotFoundError as e:
        if "no such endpoint" in e.message:
            pytest.skip("this stockade serve has no /v1/sessions routes")
        raise


def has_module(name):
    return subprocess.run(["/usr/bin/python3", "-c", "import " + name], capture_output=True).returncode == 0


