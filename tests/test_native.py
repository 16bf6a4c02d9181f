"""The compiled protocol cores (``edgeway/native.py``): built by the install where a C compiler
is (``scripts/test`` installs them), their pure-Python sources used with ``EDGEWAY_PURE=1``,
and every one of them loaded from source, never a mix, once one source is newer than its
build (an edited editable install)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from edgeway import native

ROOT = Path(native.__file__).resolve().parent.parent
PROBE = """
import importlib, sys
import edgeway.native as n
files = [importlib.import_module(p.removesuffix(".py").replace("/", ".")).__file__
         for p in n.MODULES]
from edgeway.edge.h1 import Request, RequestParser
parser = RequestParser()
parser.feed(b"GET /x HTTP/1.1\\r\\nHost: h\\r\\n\\r\\n")
request = parser.next_event()
assert isinstance(request, Request) and request.target == b"/x", request
print(n.PURE)
print("\\n".join(files))
"""


def probe(cwd: Path, installed: bool = False, **env: str) -> tuple[str, list[str]]:
    """(why the sources are used, or "None"; the files the cores were loaded from), in a
    process importing edgeway from ``cwd``, or (``installed``) as installed, from anywhere."""
    path = {} if installed else {"PYTHONPATH": str(cwd)}
    base = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=cwd, capture_output=True,
                          text=True, timeout=60, env={**base, **path, **env})
    assert done.returncode == 0, done.stderr
    why, *files = done.stdout.splitlines()
    return why, files


def test_an_install_with_a_compiler_compiles_every_core(tmp_path: Path) -> None:
    """As installed (the ``edgeway`` command runs from anywhere, not from the repository),
    every core is the compiled one, their shared library found inside the package."""
    if os.environ.get("EDGEWAY_PURE") == "1" or shutil.which("cc") is None:
        why, files = probe(tmp_path, installed=True)
        assert all(f.endswith(".py") for f in files) and why != "None"
        return
    assert all(native.extension(p) is not None for p in native.MODULES), \
        "scripts/test installs edgeway with its compiled cores: some are missing"
    library = native.LIBRARY.replace(".", "/") + "__mypyc.py"
    assert native.extension(library) is not None, "their shared library is in the package"
    why, files = probe(tmp_path, installed=True)
    assert why == "None" and not any(f.endswith(".py") for f in files), (why, files)


def test_edgeway_pure_loads_the_sources() -> None:
    why, files = probe(ROOT, EDGEWAY_PURE="1")
    assert why == "EDGEWAY_PURE=1"
    assert files == [str(ROOT / p) for p in native.MODULES]


def test_a_source_edited_after_the_build_loads_every_core_from_source(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "edgeway", tmp_path / "edgeway",
                    ignore=shutil.ignore_patterns("__pycache__"))
    edited = tmp_path / native.MODULES[-1]
    later = time.time() + 60
    os.utime(edited, (later, later))
    why, files = probe(tmp_path, EDGEWAY_PURE="")
    if all(native.extension(p) is not None for p in native.MODULES):
        assert why.startswith(native.MODULES[-1]) and "changed after" in why, why
    assert files == [str(tmp_path / p) for p in native.MODULES]
