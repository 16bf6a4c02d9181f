"""TLS objects whose record calls cost no interpreted frame.

The event loop's TLS protocol (uvloop's, and asyncio's) drives an ``ssl.SSLObject`` made by
``SSLContext.wrap_bio``: it calls its ``read``, ``write`` and ``pending`` for every record,
and the standard library's ``SSLObject`` defines them in Python, only to pass each call on
to the C object inside (``_ssl._SSLSocket``). A context given to ``direct`` makes its objects
with those three bound to the C object's own methods instead: the same calls, the same
results and errors, without a frame of Python each (~3 % of the server's CPU per proxied
HTTP request). The loops call them with positional arguments, as the C methods take them
(``read(size, [buffer])``); every other method stays the standard library's.
"""

from __future__ import annotations

import ssl
from typing import Any


class DirectObject(ssl.SSLObject):
    """``ssl.SSLObject``, with ``read``, ``write`` and ``pending`` the C object's own."""

    @classmethod
    def _create(cls, *args: Any, **kwargs: Any) -> DirectObject:
        made: DirectObject = super()._create(*args, **kwargs)  # type: ignore[misc]
        inner = getattr(made, "_sslobj", None)
        if inner is not None:  # (another implementation of ``ssl``: left as it is)
            vars(made).update(read=inner.read, write=inner.write, pending=inner.pending)
        return made


def direct(context: ssl.SSLContext) -> ssl.SSLContext:
    """``context``, making ``DirectObject``s from here on."""
    context.sslobject_class = DirectObject
    return context
