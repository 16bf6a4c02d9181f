"""The CEL package (``common-expression-language``), imported without its REPL.

``import cel`` also imports the package's interactive command line (``cel.cli``: prompt_toolkit,
pygments), about 0.3 s of a server's cold start, for nothing Edgeway uses. Its place in
``sys.modules`` is taken by an empty module first, so the package's ``from . import cli`` finds
it there. Every module of Edgeway takes ``cel`` from here."""

from __future__ import annotations

import sys
import types

sys.modules.setdefault("cel.cli", types.ModuleType("cel.cli"))

import cel  # noqa: E402  (after the placeholder, on purpose)

__all__ = ["cel"]
