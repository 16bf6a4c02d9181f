"""The request_headers module (and the shape response_headers shares): headers removed
(by name, any case) and added on the way through."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class HeaderChange:
    add: tuple[tuple[bytes, bytes], ...] = ()
    remove: frozenset[bytes] = frozenset()

    def apply(self, headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        if not self.add and not self.remove:
            return headers
        kept = [(k, v) for k, v in headers if k.lower() not in self.remove]
        return kept + list(self.add)


def compile(module: dict[str, Any]) -> HeaderChange:
    return HeaderChange(tuple((k.encode(), v.encode()) for k, v in
                              (module.get("add") or {}).items()),
                        frozenset(h.lower().encode() for h in module.get("remove") or []))
