"""Compiles the sans-I/O protocol cores listed in ``edgeway/native.py`` with mypyc when the
package is installed; everything else is in ``pyproject.toml``. A build that cannot compile
them (no C compiler or Python headers, ``EDGEWAY_PURE=1``) installs the package without
them, and their pure-Python sources are used: it says so and goes on."""

from __future__ import annotations

import os
import runpy
import sys
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

NATIVE = runpy.run_path("edgeway/native.py")
MODULES: tuple[str, ...] = NATIVE["MODULES"]
LIBRARY: str = NATIVE["LIBRARY"]


def note(text: str) -> None:
    print(f"edgeway: {text}; the pure-Python modules are used", file=sys.stderr)


class OptionalBuild(build_ext):
    """``build_ext`` that leaves the extensions out when they do not build."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # (a compiler missing or failing: CompileError, OSError…)
            note(f"the compiled modules did not build ({type(exc).__name__}: {exc})")

    def build_extension(self, ext: Any) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            note(f"{ext.name} did not build ({type(exc).__name__}: {exc})")


def extensions() -> list[Any]:
    if os.environ.get("EDGEWAY_PURE") == "1":  # (or compiled already: scripts/venv)
        return []
    try:
        from mypyc.build import mypycify
        # (the build environment has none of the runtime dependencies: their types are
        # taken as unknown there, which compiles to plain Python calls into them; the modules
        # the compiled ones import are read for their types, not checked: ``mypy`` does that)
        # (the shared library of the compiled modules inside the package, where the package's
        # own path finds it, rather than a top-level module beside it)
        return list(mypycify(["--ignore-missing-imports", "--follow-imports=silent", *MODULES],
                             opt_level="3", group_name=LIBRARY))
    except (Exception, SystemExit) as exc:  # (mypy missing, or a module it cannot check:
        note(f"mypyc cannot compile the modules ({type(exc).__name__}: {exc})")  # it exits)
        return []


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuild})
