"""The client's build backend (PEP 517, with PEP 660's editable hooks):
the standard library only, in the tree (pyproject.toml's backend-path), so
that `pip install ./clients/python` in a fresh venv needs nothing from an
index. Debian's venv has pip and setuptools but not `wheel`, and pip builds
in an isolated environment that fetches the build requirements: with
setuptools as the backend, an offline install failed there
("invalid command 'bdist_wheel'", or no index to fetch from).

The package is pure Python, so a wheel is a zip of stockade/ and its
dist-info (METADATA, WHEEL, RECORD with each file's sha256), and an sdist
the files that build it again. The metadata come from pyproject.toml's
[project] table, the one place they are written.
"""

import base64
import csv
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile

PACKAGE = "stockade"
# What the sdist carries besides the package: enough to build it again.
SDIST_FILES = ["pyproject.toml", "README.md", "_backend/stockade_build.py"]
# Zip and tar entries get one fixed date (SOURCE_DATE_EPOCH's when set), so
# that the same tree builds the same bytes.
DEFAULT_EPOCH = 315532800  # 1980-01-01, the earliest a zip can say


def _epoch():
    return max(int(os.environ.get("SOURCE_DATE_EPOCH", DEFAULT_EPOCH)), DEFAULT_EPOCH)


def project(root="."):
    """pyproject.toml's [project] table: tomllib where Python has it
    (3.11), else a reader of the flat subset this file uses (strings and
    lists of strings), which a test holds equal to tomllib's."""
    path = os.path.join(root, "pyproject.toml")
    try:
        import tomllib
    except ImportError:
        with open(path, encoding="utf-8") as f:
            return _flat_table(f.read(), "project")
    with open(path, "rb") as f:
        return tomllib.load(f)["project"]


_KEY = re.compile(r'^([A-Za-z0-9_-]+)\s*=\s*(.*)$')
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')


def _flat_table(text, name):
    out, table, key, items = {}, None, None, None
    for raw in text.splitlines():
        line = raw.split(" #")[0].strip() if not raw.strip().startswith("#") else ""
        if not line:
            continue
        if items is not None:  # inside a list of several lines
            items += [_unescape(s) for s in _STRING.findall(line)]
            if line.endswith("]"):
                out[key], items = items, None
            continue
        if line.startswith("["):
            table = line.strip("[]").strip()
            continue
        m = _KEY.match(line)
        if table != name or not m:
            continue
        key, value = m.group(1), m.group(2).strip()
        if value.startswith("["):
            items = [_unescape(s) for s in _STRING.findall(value)]
            if value.endswith("]"):
                out[key], items = items, None
        else:
            s = _STRING.match(value)
            if not s:
                raise ValueError(f"pyproject.toml [{name}] {key}: only strings and lists of strings are read here")
            out[key] = _unescape(s.group(1))
    return out


def _unescape(s):
    return s.replace('\\"', '"').replace("\\\\", "\\")


def _names(meta):
    name = re.sub(r"[-_.]+", "_", meta["name"]).lower()
    return name, meta["version"]


def _metadata(meta, root="."):
    lines = ["Metadata-Version: 2.1", f"Name: {meta['name']}", f"Version: {meta['version']}"]
    if meta.get("description"):
        lines.append(f"Summary: {meta['description']}")
    if meta.get("requires-python"):
        lines.append(f"Requires-Python: {meta['requires-python']}")
    for c in meta.get("classifiers", []):
        lines.append(f"Classifier: {c}")
    for d in meta.get("dependencies", []):
        lines.append(f"Requires-Dist: {d}")
    body = ""
    readme = meta.get("readme")
    if isinstance(readme, str):
        lines.append("Description-Content-Type: text/markdown")
        with open(os.path.join(root, readme), encoding="utf-8") as f:
            body = f.read()
    return "\n".join(lines) + "\n\n" + body


def _dist_info(meta):
    name, version = _names(meta)
    return f"{name}-{version}.dist-info"


def _dist_info_files(meta):
    wheel = "Wheel-Version: 1.0\nGenerator: stockade_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    return {"METADATA": _metadata(meta).encode(), "WHEEL": wheel.encode(), "top_level.txt": f"{PACKAGE}\n".encode()}


def _package_files(root="."):
    """stockade/'s sources and py.typed, sorted: nothing a build left."""
    out = []
    for d, dirs, files in os.walk(os.path.join(root, PACKAGE)):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        for f in sorted(files):
            if f.endswith(".py") or f == "py.typed":
                out.append(os.path.relpath(os.path.join(d, f), root))
    return out


def _write_wheel(wheel_directory, meta, contents):
    """contents: (archive name, bytes) pairs; the dist-info and its RECORD
    are added. Returns the wheel's file name."""
    name, version = _names(meta)
    info = _dist_info(meta)
    filename = f"{name}-{version}-py3-none-any.whl"
    contents = list(contents) + [(f"{info}/{k}", v) for k, v in _dist_info_files(meta).items()]
    record = io.StringIO()
    w = csv.writer(record, lineterminator="\n")
    for arc, data in contents:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        w.writerow([arc, f"sha256={digest}", len(data)])
    w.writerow([f"{info}/RECORD", "", ""])
    contents.append((f"{info}/RECORD", record.getvalue().encode()))
    date = time.gmtime(_epoch())[:6]
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in contents:
            zi = zipfile.ZipInfo(arc, date_time=date)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    return filename


def _read(path):
    with open(path, "rb") as f:
        return f.read()


# PEP 517's hooks.

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    meta = project()
    info = _dist_info(meta)
    os.makedirs(os.path.join(metadata_directory, info), exist_ok=True)
    for k, v in _dist_info_files(meta).items():
        with open(os.path.join(metadata_directory, info, k), "wb") as f:
            f.write(v)
    return info


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, project(), [(p, _read(p)) for p in _package_files()])


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """A wheel whose one file, a .pth, puts this source tree on sys.path:
    edits to stockade/ take effect without reinstalling."""
    pth = (os.path.abspath(".") + "\n").encode()
    return _write_wheel(wheel_directory, project(), [(f"_{PACKAGE}_editable.pth", pth)])


def build_sdist(sdist_directory, config_settings=None):
    meta = project()
    name, version = _names(meta)
    base = f"{name}-{version}"
    filename = base + ".tar.gz"
    files = [(p, _read(p)) for p in SDIST_FILES + _package_files()]
    files.append(("PKG-INFO", _metadata(meta).encode()))
    # gzip's own header carries a date too: write through a GzipFile with
    # the fixed one.
    import gzip

    with open(os.path.join(sdist_directory, filename), "wb") as raw:
        with gzip.GzipFile(filename=base + ".tar", mode="wb", fileobj=raw, mtime=_epoch()) as gz:
            with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
                for p, data in sorted(files):
                    ti = tarfile.TarInfo(f"{base}/{p}")
                    ti.size, ti.mtime, ti.mode = len(data), _epoch(), 0o644
                    tar.addfile(ti, io.BytesIO(data))
    return filename
