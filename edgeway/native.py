"""The modules compiled to C with mypyc when the package is installed (``setup.py``), and the
choice, at import, between them and their pure-Python sources.

The sans-I/O protocol cores on the hot paths: HTTP/1.1 heads (``edge/h1``,
``edge/h1_response``), muxado's frames, session and streams (``tunnel/muxado``) and the
agent's HTTP tap (``agent/framing``, ``heads``, ``captures``, ``metrics``); and what drives
them per request: the edge's HTTP path (``edge/http``, ``forwarding``, ``relay``,
``client``, ``pool``, ``hosts``, ``exchange``, ``answers``, the ``router``'s remembered
decisions, the dashboard's ``recent`` traffic), the agent's proxy streams (``agent/proxy``,
``inspect``) and a stream spliced with a transport (``tunnel/splice``). They are mypy-strict Python,
compiled as they are: the same source is the pure fallback, used when the build had no
compiler (a build that fails installs the package without them), with ``EDGEWAY_PURE=1``, or
when a compiled module is stale: a source edited after its build (an editable install) would
otherwise be shadowed by the extension beside it. Then every one of them is loaded from
source, never a mix (compiled modules call each other directly, so one from source beside
the others would give two versions of its classes).

Compiled, a class is native (no interpreted subclass, no weak reference to it: ``Pipe``
and ``MuxConnection`` stay interpreted for that), an argument's annotation is checked at
the call (a router a test scripts is a ``Protocol``), and an ``except ... as`` name is typed
by its first clause: each clause of one ``try`` names its exception on its own.

No third-party import here: ``setup.py`` reads ``MODULES`` from this file before anything is
installed.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

MODULES = (
    "edgeway/edge/h1.py",
    "edgeway/edge/h1_response.py",
    "edgeway/tunnel/muxado/events.py",
    "edgeway/tunnel/muxado/frames.py",
    "edgeway/tunnel/muxado/receive.py",
    "edgeway/tunnel/muxado/core.py",
    "edgeway/tunnel/muxado/session.py",
    "edgeway/agent/heads.py",
    "edgeway/agent/captures.py",
    "edgeway/agent/metrics.py",
    "edgeway/agent/framing.py",
    "edgeway/agent/inspect.py",
    "edgeway/agent/proxy.py",
    "edgeway/edge/relay.py",
    "edgeway/edge/forwarding.py",
    "edgeway/edge/client.py",
    "edgeway/edge/pool.py",
    "edgeway/edge/fast.py",
    "edgeway/tunnel/muxado/stream.py",
    "edgeway/tunnel/muxado/aio.py",
    "edgeway/tunnel/splice.py",
    "edgeway/edge/http.py",
    "edgeway/edge/hosts.py",
    "edgeway/edge/exchange.py",
    "edgeway/edge/router.py",
    "edgeway/edge/answers.py",
    "edgeway/recent.py",
)
LIBRARY = "edgeway.cores"  # mypyc's group: the shared library is edgeway/cores__mypyc.*.so
SLACK = 2.0  # seconds a source may be newer than its extension (both written by one install)
ROOT = Path(__file__).resolve().parent.parent


def _name(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


def extension(path: str) -> Path | None:
    """The compiled extension beside the source ``path`` (relative to the root), if any."""
    source = ROOT / path
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = source.with_suffix(suffix)
        if candidate.exists():
            return candidate
    return None


def reason() -> str | None:
    """Why the pure-Python modules are used (None: the compiled ones are)."""
    if os.environ.get("EDGEWAY_PURE") == "1":
        return "EDGEWAY_PURE=1"
    built = [(path, extension(path)) for path in MODULES]
    if not all(ext is not None for _, ext in built) or extension(
            LIBRARY.replace(".", "/") + "__mypyc.py") is None:
        return "not compiled (no C compiler at install, or a partial build)"
    for path, ext in built:
        assert ext is not None
        if (ROOT / path).stat().st_mtime > ext.stat().st_mtime + SLACK:
            return f"{path} changed after it was compiled (reinstall to compile it again)"
    return None


class _Sources:
    """A finder that loads the compiled modules from their ``.py`` sources."""

    def __init__(self) -> None:
        self.paths = {_name(p): ROOT / p for p in MODULES}

    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        source = self.paths.get(name)
        if source is None:
            return None
        return importlib.util.spec_from_file_location(
            name, source, loader=importlib.machinery.SourceFileLoader(name, str(source)))


PURE: str | None = None  # set by ``choose``: why the sources are used, or None


def choose() -> None:
    """At the package's import: the sources instead of the extensions when ``reason`` says
    so. (Before any of them is imported: ``edgeway/__init__`` calls it first.)"""
    global PURE
    PURE = reason()
    if PURE is not None and not any(isinstance(f, _Sources) for f in sys.meta_path):
        sys.meta_path.insert(0, _Sources())
