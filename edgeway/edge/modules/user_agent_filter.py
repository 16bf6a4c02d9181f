"""The user_agent_filter module: regular expressions compiled when the snapshot is built; a
deny match refuses (403), and when there are allow patterns one of them must match."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from edgeway.edge.h1 import Headers, header
from edgeway.edge.hooks import Compiling, Hook
from edgeway.edge.pages import Fixed, page


@dataclass(frozen=True)
class UserAgents(Hook):
    name = "user_agent_filter"
    allow: tuple[re.Pattern[str], ...]
    deny: tuple[re.Pattern[str], ...]

    def allows(self, user_agent: str) -> bool:
        if any(p.search(user_agent) for p in self.deny):
            return False
        return not self.allow or any(p.search(user_agent) for p in self.allow)

    def check(self, ip: str, headers: Headers) -> Fixed | None:
        if self.allows(header(headers, b"user-agent").decode("latin-1")):
            return None
        return page(403, "Forbidden", "Your user agent may not access this site.", 4007)


def compile(module: dict[str, Any], ctx: Compiling | None = None) -> UserAgents:
    return UserAgents(tuple(re.compile(p) for p in module.get("allow") or []),
                      tuple(re.compile(p) for p in module.get("deny") or []))
