"""The response_headers module: the shape of request_headers, applied to the response head."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edgeway.edge.h1 import Headers
from edgeway.edge.hooks import Compiling, Exchange, Hook
from edgeway.edge.modules.request_headers import change


@dataclass(frozen=True)
class ResponseHeaders(Hook):
    name = "response_headers"
    add: tuple[tuple[bytes, bytes], ...] = ()
    remove: frozenset[bytes] = frozenset()

    def response(self, x: Exchange, status: int, headers: Headers) -> Headers:
        kept = [(k, v) for k, v in headers if k.lower() not in self.remove]
        return kept + list(self.add)


def compile(module: dict[str, Any], ctx: Compiling | None = None) -> ResponseHeaders | None:
    out = ResponseHeaders(change(module),
                          frozenset(str(h).lower().encode() for h in module.get("remove") or []))
    return out if out.add or out.remove else None
