"""A path router keyed by segments: a dict lookup per segment instead of a regex per route.

Patterns are ``/a/{x}/b``; a ``{param}`` segment matches any one non-empty segment. Literal
segments win over parameters, with backtracking, so ``/edges/https/{id}/routes`` and
``/edges/https/{id}/{module}``-style neighbours resolve as written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class _Node:
    literal: dict[str, _Node] = field(default_factory=dict)
    param: _Node | None = None
    # method -> (endpoint, parameter names in order)
    methods: dict[str, tuple[Any, tuple[str, ...]]] = field(default_factory=dict)


class PathRouter:
    def __init__(self) -> None:
        self._root = _Node()

    def add(self, pattern: str, methods: list[str], endpoint: Any) -> None:
        node = self._root
        names: list[str] = []
        for seg in pattern.strip("/").split("/") if pattern != "/" else []:
            if seg.startswith("{") and seg.endswith("}"):
                names.append(seg[1:-1])
                node.param = node.param or _Node()
                node = node.param
            else:
                node = node.literal.setdefault(seg, _Node())
        for method in methods:
            if method in node.methods:
                raise ValueError(f"duplicate route {method} {pattern}")
            node.methods[method] = (endpoint, tuple(names))

    def match(self, path: str) -> tuple[dict[str, tuple[Any, tuple[str, ...]]], list[str]] | None:
        """The methods served at ``path`` and the parameter values, or None."""
        segs = path.strip("/").split("/") if path not in ("", "/") else []
        values: list[str] = []
        node = _walk(self._root, segs, 0, values)
        return (node.methods, values) if node is not None else None


def _walk(node: _Node, segs: list[str], i: int, values: list[str]) -> _Node | None:
    if i == len(segs):
        return node if node.methods else None
    seg = segs[i]
    nxt = node.literal.get(seg)
    if nxt is not None:
        found = _walk(nxt, segs, i + 1, values)
        if found is not None:
            return found
    if node.param is not None and seg:
        values.append(seg)
        found = _walk(node.param, segs, i + 1, values)
        if found is not None:
            return found
        values.pop()
    return None
