"""Option groups of ``edgeway serve`` that belong to one feature each (``domains``,
``identity``, ``ssh``): each adds its options and turns their values into that feature's
configuration, refusing a bad value with a message naming the option. Every option also reads
an ``EDGEWAY_*`` environment variable; the command line wins. ``option`` declares one: the
variable it reads is named there once, and its help says it."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from typing import Any

from edgeway.config import parse_addr


def env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(f"EDGEWAY_{name}", default)


def public(addr: str) -> tuple[str, int] | None:
    """A listen address, or None for ``off``."""
    return None if addr.strip().lower() == "off" else parse_addr(addr)


def option(parser: argparse.ArgumentParser, flag: str, default: Any = None, *,
           var: str | None = None, read: Callable[[str], Any] | None = None,
           **kwargs: Any) -> None:
    """Add ``flag`` to ``parser``, its default taken from ``EDGEWAY_<VAR>`` when that is set
    and not empty (VAR: the flag's name in capitals with ``_`` for ``-``, unless given), else
    ``default``; its help ends with the variable's name. A string is the default as the
    variable says it (argparse converts it as it does the command line's, so a bad one is an
    error naming the option); ``read`` makes it something else (a switch, a list)."""
    name = var or flag.lstrip("-").upper().replace("-", "_")
    text = env(name)
    if text:
        default = read(text) if read is not None else text
    kwargs["help"] = f"{kwargs['help']} [env: EDGEWAY_{name}]"
    parser.add_argument(flag, default=default, **kwargs)


def switch(text: str) -> bool:
    """An on/off variable: anything but 0 and false (in any case) is on."""
    return text.strip().lower() not in ("0", "false")


class AppendOver(argparse.Action):
    """``append`` whose first value on the command line replaces the default (the list an
    environment variable gave) rather than adding to it: the command line wins."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:
        items = getattr(namespace, self.dest, None)
        items = [] if items is None or items is self.default else list(items)
        setattr(namespace, self.dest, [*items, values])
