"""The user_agent_filter module: regular expressions compiled when the snapshot is built; a
deny match refuses, and when there are allow patterns one of them must match."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class UserAgents:
    allow: tuple[re.Pattern[str], ...]
    deny: tuple[re.Pattern[str], ...]

    def allows(self, user_agent: str) -> bool:
        if any(p.search(user_agent) for p in self.deny):
            return False
        return not self.allow or any(p.search(user_agent) for p in self.allow)


def compile(module: dict[str, Any]) -> UserAgents:
    return UserAgents(tuple(re.compile(p) for p in module.get("allow") or []),
                      tuple(re.compile(p) for p in module.get("deny") or []))
