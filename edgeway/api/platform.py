"""The running platform as the API sees it: settings, database and the API-key cache."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from edgeway.catalog.model import Settings
from edgeway.pki.seal import Sealer
from edgeway.restrictions import KINDS as RESTRICTION_KINDS
from edgeway.restrictions import Restrictions
from edgeway.store.db import Database

AUTH_KINDS = frozenset({"api_keys", "users", "bot_users"})


class AgentCommands(Protocol):
    async def command(self, session_id: str, kind: int, body: dict[str, Any],
                      timeout: float = 10.0) -> str | None: ...


@dataclass(frozen=True)
class Caller:
    key_id: str
    owner_id: str
    is_admin: bool
    role: str = "admin"  # of the API key: admin, operator or read_only (api.guards)


@dataclass
class Platform:
    settings: Settings
    db: Database
    sealer: Sealer
    # token hash -> (caller, monotonic expiry). Entries live AUTH_TTL seconds, and every write
    # to api_keys, users or bot_users in this process clears the cache at once.
    auth_cache: dict[str, tuple[Caller, float]] = field(default_factory=dict)
    auth_ttl: float = 5.0
    restrictions: Restrictions = field(init=False)
    # the tunnel listener of this node, set by ``edgeway serve`` (agent commands go through it)
    agents: AgentCommands | None = None
    # called with the collection after each committed write (the edge's router listens)
    watchers: list[Callable[[str], None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.restrictions = Restrictions(self.db)

    def changed(self, collection: str) -> None:
        """A write to ``collection`` committed: drop what was compiled from it."""
        if collection in AUTH_KINDS:
            self.auth_cache.clear()
        if collection in RESTRICTION_KINDS:
            self.restrictions.invalidate()
        for watch in self.watchers:
            watch(collection)

    def cached_caller(self, token_hash: str) -> Caller | None:
        hit = self.auth_cache.get(token_hash)
        if hit is None or hit[1] < time.monotonic():
            return None
        return hit[0]

    def remember(self, token_hash: str, caller: Caller) -> None:
        if len(self.auth_cache) > 10_000:
            self.auth_cache.clear()
        self.auth_cache[token_hash] = (caller, time.monotonic() + self.auth_ttl)
