"""The client installs as docs/python.md says, offline, in the shape a user
types: `python3 -m venv v && v/bin/pip install ./clients/python` in a fresh
venv (Debian's python3-venv: pip and setuptools, no `wheel`), in a network
namespace of its own so that nothing can be fetched. The venv's client then
runs against the server. The build backend is the tree's own
(_backend/stockade_build.py, the standard library only)."""

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(HERE, "_backend"))

import stockade_build  # noqa: E402


def offline(cmd, cwd):
    """cmd with no network at all (a fresh network namespace: loopback
    down, no route), and no pip configuration of the user's."""
    if shutil.which("unshare") is None:
        pytest.fail("needs unshare (util-linux) to take the network away")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(cwd), "PIP_CONFIG_FILE": os.devnull}
    return subprocess.run(["unshare", "--net", "--"] + cmd, cwd=str(cwd), env=env, capture_output=True, text=True,
                          timeout=300)


def user_copy(tmp_path):
    # pip may write into the tree it builds: a copy, so that the work
    # tree stays as committed. The user's ./clients/python.
    src = tmp_path / "clients" / "python"
    shutil.copytree(HERE, str(src), ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "tests", "bench"))
    return src


def test_pip_install_in_a_fresh_venv_offline(tmp_path, server):
    src = user_copy(tmp_path)
    p = subprocess.run([sys.executable, "-m", "venv", "v"], cwd=str(tmp_path), capture_output=True, text=True)
    assert p.returncode == 0, "python3 -m venv (Debian's python3-venv):\n" + p.stdout + p.stderr
    p = offline(["v/bin/pip", "install", "./clients/python"], tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Successfully installed stockade-0.1.0" in p.stdout, p.stdout

    venv_python = str(tmp_path / "v" / "bin" / "python")
    code = ("import stockade, sys\n"
            "assert stockade.__file__.startswith(sys.prefix), (stockade.__file__, sys.prefix)\n"
            "assert stockade.__version__ == '0.1.0'\n"
            "print(stockade.Client().run('print(1 + 1)').stdout, end='')\n")
    # From elsewhere than the source, with no PYTHONPATH: the venv's copy.
    p = subprocess.run([venv_python, "-c", code], capture_output=True, text=True, cwd="/",
                       env={"STOCKADE_SOCKET": server.socket, "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0 and p.stdout == "2\n", p.stdout + p.stderr
    site = subprocess.run([venv_python, "-c", "import stockade, os; print(os.path.dirname(stockade.__file__))"],
                          capture_output=True, text=True, cwd="/").stdout.strip()
    # The package's files, all of them, and nothing of the tree besides.
    assert sorted(n for n in os.listdir(site) if n != "__pycache__") == sorted(
        n for n in os.listdir(str(src / "stockade")) if n != "__pycache__")

    # pip install -e: the venv imports the source tree itself.
    p = offline(["v/bin/pip", "install", "-e", "./clients/python"], tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    p = subprocess.run([venv_python, "-c", "import stockade; print(stockade.__file__)"], capture_output=True,
                       text=True, cwd="/")
    assert p.stdout.strip() == str(src / "stockade" / "__init__.py"), p.stdout + p.stderr


def test_sdist_builds_the_same_wheel(tmp_path, monkeypatch):
    """The sdist carries what builds it again, and its wheel holds the same
    package files, with a RECORD pip verifies."""
    monkeypatch.chdir(HERE)
    sd = stockade_build.build_sdist(str(tmp_path))
    wheel = stockade_build.build_wheel(str(tmp_path))
    assert (sd, wheel) == ("stockade-0.1.0.tar.gz", "stockade-0.1.0-py3-none-any.whl")
    with tarfile.open(str(tmp_path / sd)) as t:
        t.extractall(str(tmp_path / "x"))
    monkeypatch.chdir(str(tmp_path / "x" / "stockade-0.1.0"))
    os.mkdir("out")
    again = stockade_build.build_wheel("out")
    first = zipfile.ZipFile(str(tmp_path / wheel))
    second = zipfile.ZipFile(os.path.join("out", again))
    assert first.namelist() == second.namelist()
    assert [first.read(n) for n in first.namelist()] == [second.read(n) for n in second.namelist()]
    names = first.namelist()
    assert "stockade/py.typed" in names and "stockade/_http.py" in names
    assert not any("tests" in n or "__pycache__" in n or n.startswith("_backend") for n in names)
    meta = first.read("stockade-0.1.0.dist-info/METADATA").decode()
    assert "Name: stockade\n" in meta and "Requires-Python: >=3.9\n" in meta


def test_backend_reads_pyproject_as_tomllib_does():
    """Below Python 3.11 the backend reads [project] itself: what it reads
    is what tomllib reads."""
    tomllib = pytest.importorskip("tomllib")
    with open(os.path.join(HERE, "pyproject.toml"), "rb") as f:
        want = tomllib.load(f)["project"]
    with open(os.path.join(HERE, "pyproject.toml"), encoding="utf-8") as f:
        got = stockade_build._flat_table(f.read(), "project")
    assert got == want
