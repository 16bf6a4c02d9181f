"""Option groups of ``edgeway serve`` that belong to one feature each (``domains``,
``identity``, ``ssh``): each adds its options and turns their values into that feature's
configuration, refusing a bad value with a message naming the option. Every option also reads
an ``EDGEWAY_*`` environment variable; the command line wins."""

from __future__ import annotations

import os

from edgeway.config import parse_addr


def env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(f"EDGEWAY_{name}", default)


def public(addr: str) -> tuple[str, int] | None:
    """A listen address, or None for ``off``."""
    return None if addr.strip().lower() == "off" else parse_addr(addr)
