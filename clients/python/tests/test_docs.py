"""Every ```python block of README.md and docs/*.md runs as written,
against the test server ($STOCKADE_SOCKET), in an empty directory; a block
after "<!-- not run: REASON -->" is skipped with its reason. What the
README's agent loop says it does, it did: printed 285 and saved
squares.png."""

import glob
import os
import re
import subprocess
import sys

import pytest

from conftest import has_module

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
CLIENT = os.path.join(ROOT, "clients", "python")
NOT_RUN = re.compile(r"<!--\s*not run:\s*(.*?)\s*-->")


def python_blocks():
    files = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    for f in files:
        lines = open(f).read().split("\n")
        i = 0
        while i < len(lines):
            if lines[i].strip() == "```python":
                start = i
                j = i + 1
                while lines[j].strip() != "```":
                    j += 1
                before = [l for l in lines[:start] if l.strip()]
                m = NOT_RUN.search(before[-1]) if before else None
                yield pytest.param(os.path.relpath(f, ROOT), start + 1, "\n".join(lines[start + 1:j]),
                                   m.group(1) if m else None, id=f"{os.path.relpath(f, ROOT)}:{start + 1}")
                i = j
            i += 1


BLOCKS = list(python_blocks())


def test_the_readme_has_its_agent_loop():
    assert any(p.values[0] == "README.md" and "session.run" in p.values[2] for p in BLOCKS)


@pytest.mark.parametrize("doc,line,code,skip", BLOCKS)
def test_python_example_runs(doc, line, code, skip, server, has_sessions, tmp_path):
    if skip:
        pytest.skip(skip)
    if "matplotlib" in code and not has_module("matplotlib"):
        pytest.skip("needs Debian's python3-matplotlib")
    p = subprocess.run([sys.executable, "-c", code], cwd=str(tmp_path), capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": CLIENT, "STOCKADE_SOCKET": server.socket})
    assert p.returncode == 0, f"{doc}:{line}: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    if doc == "README.md" and "squares.png" in code:
        assert p.stdout.split() == ["285", "None"], p.stdout
        with open(tmp_path / "squares.png", "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
