"""`pip install ./clients/python` works offline: no index, no build
isolation (Debian's setuptools builds it), into a directory of its own;
the installed copy then runs against the server from elsewhere."""

import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_pip_install_offline(tmp_path, server):
    # pip builds in the source directory (build/, *.egg-info): from a copy,
    # so the tree stays as committed.
    src = tmp_path / "src"
    shutil.copytree(HERE, str(src), ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "tests"))
    target = tmp_path / "site"
    p = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-index", "--no-build-isolation", "--no-cache-dir",
         "--disable-pip-version-check", "--target", str(target), str(src)],
        capture_output=True, text=True, cwd=str(tmp_path), env={**os.environ, "PIP_NO_INPUT": "1"})
    assert p.returncode == 0, p.stdout + p.stderr
    assert (target / "stockade" / "__init__.py").exists()
    assert any(n.startswith("stockade-0.1.0") and n.endswith(".dist-info") for n in os.listdir(target))
    code = ("import stockade, sys\n"
            "assert stockade.__file__.startswith(sys.argv[1]), stockade.__file__\n"
            "print(stockade.Client().run('print(1 + 1)').stdout, end='')\n")
    p = subprocess.run([sys.executable, "-s", "-c", code, str(target)], capture_output=True, text=True,
                       cwd=str(tmp_path), env={"PYTHONPATH": str(target), "STOCKADE_SOCKET": server.socket})
    assert p.returncode == 0 and p.stdout == "2\n", p.stdout + p.stderr
