"""TLS objects whose per-record calls go straight to the C implementation.

The event loop's TLS transport (uvloop's and asyncio's) drives a ``ssl.SSLObject``: for every
read it calls ``read`` (and ``pending``), for every write ``write``, each a Python method in
``ssl.py`` that only forwards to the ``_ssl`` object under it. On a tunnel session that is a
Python frame per record, several per proxied request (about 4% of the server's CPU on the
HTTP path: bench.http_profile). ``Direct`` binds those three to the ``_ssl`` object's own
methods when it is made, so they cost a C call; everything else is ``SSLObject``'s.

``direct(context)`` makes a context create them (``SSLContext.sslobject_class``, which
``wrap_bio`` uses). Where the standard library is not shaped as this expects (no
``_create``, no ``_sslobj``), the context is left as it is.
"""

from __future__ import annotations

import ssl
from typing import Any


class Direct(ssl.SSLObject):
    """An ``SSLObject`` whose ``read``, ``write`` and ``pending`` are the C methods."""

    @classmethod
    def _create(cls, *args: Any, **kwargs: Any) -> Direct:
        obj: Direct = super()._create(*args, **kwargs)  # type: ignore[misc]
        inner = obj._sslobj  # type: ignore[attr-defined]
        # (instance attributes shadow the class's methods; the C object holds its owner,
        # this one, weakly: no cycle)
        obj.read = inner.read  # type: ignore[method-assign]
        obj.write = inner.write  # type: ignore[method-assign]
        obj.pending = inner.pending  # type: ignore[method-assign]
        return obj


SHAPED = hasattr(ssl.SSLObject, "_create") and hasattr(ssl.SSLContext, "sslobject_class")


def direct(context: ssl.SSLContext) -> ssl.SSLContext:
    """``context``, creating ``Direct`` objects from now on (see the module docstring)."""
    if SHAPED:
        context.sslobject_class = Direct
    return context
