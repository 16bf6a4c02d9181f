"""The request_headers module (and the shape response_headers shares): headers removed
(by name, any case) and added on the way through: to the request as it goes upstream, after
the edge's own ``X-Forwarded-*`` headers (which it may remove too). ``add`` is an object of
names and values, or (agent binds) a list of name and value pairs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edgeway.edge.h1 import Headers
from edgeway.edge.hooks import Compiling, Exchange, Hook


@dataclass(frozen=True)
class HeaderChange(Hook):
    name = "request_headers"
    add: tuple[tuple[bytes, bytes], ...] = ()
    remove: frozenset[bytes] = frozenset()

    def apply(self, headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        if not self.add and not self.remove:
            return headers
        kept = [(k, v) for k, v in headers if k.lower() not in self.remove]
        return kept + list(self.add)

    def upstream(self, x: Exchange, headers: Headers) -> Headers:
        return self.apply(headers)


def change(module: dict[str, Any]) -> tuple[tuple[bytes, bytes], ...]:
    add = module.get("add") or {}
    pairs = add.items() if isinstance(add, dict) else add
    return tuple((str(k).encode(), str(v).encode()) for k, v in pairs)


def compile(module: dict[str, Any], ctx: Compiling | None = None) -> HeaderChange | None:
    out = HeaderChange(change(module),
                       frozenset(str(h).lower().encode() for h in module.get("remove") or []))
    return out if out.add or out.remove else None
