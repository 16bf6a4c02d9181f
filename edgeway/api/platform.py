"""The calling identity of an API request, and the cache of API keys checked recently."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

AUTH_KINDS = frozenset({"api_keys", "users", "bot_users", "service_users"})


@dataclass(frozen=True)
class Caller:
    key_id: str
    owner_id: str
    is_admin: bool
    role: str = "admin"  # of the API key: admin, operator or read_only (api.guards)


@dataclass
class AuthCache:
    """Token hash -> (caller, monotonic expiry). Entries live ``ttl`` seconds, and every
    write to api_keys, users, bot_users or service_users in this process clears the cache at once
    (``changed``, a watcher of the platform's change bus)."""
    ttl: float = 5.0
    entries: dict[str, tuple[Caller, float]] = field(default_factory=dict)

    def changed(self, collection: str) -> None:
        if collection in AUTH_KINDS:
            self.entries.clear()

    def get(self, token_hash: str) -> Caller | None:
        hit = self.entries.get(token_hash)
        if hit is None or hit[1] < time.monotonic():
            return None
        return hit[0]

    def put(self, token_hash: str, caller: Caller) -> None:
        if len(self.entries) > 10_000:
            self.entries.clear()
        self.entries[token_hash] = (caller, time.monotonic() + self.ttl)
