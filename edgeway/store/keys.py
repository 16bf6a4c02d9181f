"""The unique-key columns of a kind's table (``k_<member>``): what the repository writes and
the schema declares. Apart from ``schema`` so that the repository, on every start, does not
import SQLAlchemy (only migrations need it)."""

from __future__ import annotations

from edgeway.catalog.model import Kind


def key_columns(kind: Kind) -> list[str]:
    cols: list[str] = []
    for key in kind.unique:
        cols += [f"k_{m}" for m in key if f"k_{m}" not in cols]
    return cols
