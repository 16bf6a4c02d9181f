"""The core every server part shares: settings, the store, the sealer, the IP restrictions
and the change bus. The API, the tunnel listener and the edge build on it; none on another's
handlers. Writes through the API announce the collection they changed (``changed``): the
restrictions drop what they compiled, and every watcher (the edge's router, the listeners,
the tunnel listener, the API's key cache) is told."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from edgeway.catalog.model import Settings
from edgeway.pki.seal import Sealer
from edgeway.restrictions import KINDS as RESTRICTION_KINDS
from edgeway.restrictions import Restrictions
from edgeway.store.db import Database


class AgentCommands(Protocol):
    async def command(self, session_id: str, kind: int, body: dict[str, Any],
                      timeout: float = 10.0) -> str | None: ...


class EventDelivery(Protocol):
    async def verify(self, destination_id: str, doc: dict[str, Any]) -> dict[str, Any]: ...


@dataclass
class Platform:
    settings: Settings
    db: Database
    sealer: Sealer
    restrictions: Restrictions = field(init=False)
    # the tunnel listener of this node, set by ``edgeway serve`` (agent commands go through it)
    agents: AgentCommands | None = None
    # this node's event delivery, set by ``edgeway serve`` (``edgeway.events``)
    events: EventDelivery | None = None
    # called with the collection after each committed write
    watchers: list[Callable[[str], None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.restrictions = Restrictions(self.db)

    def changed(self, collection: str) -> None:
        """A write to ``collection`` committed: drop what was compiled from it."""
        if collection in RESTRICTION_KINDS:
            self.restrictions.invalidate()
        for watch in self.watchers:
            watch(collection)
