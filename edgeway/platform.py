"""The core every server part shares: settings, the store, the sealer, the IP restrictions
and the change bus. The API, the tunnel listener and the edge build on it; none on another's
handlers. Writes through the API announce the collection they changed (``changed``): the
restrictions drop what they compiled, and every watcher (the edge's router, the listeners,
the tunnel listener, the API's key cache) is told. With ``publish`` set (nodes sharing a
PostgreSQL database: ``store.pgnotify``), the other nodes are told too, and what they
announce arrives here through ``local``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from edgeway import catalog
from edgeway.catalog.runtime import CLOUD_CHANGED
from edgeway.pki.seal import Sealer
from edgeway.recent import RecentTraffic
from edgeway.restrictions import KINDS as RESTRICTION_KINDS
from edgeway.restrictions import Restrictions
from edgeway.settings import Settings
from edgeway.store.db import Database

# what is announced besides the catalog's collections (``everything`` tells them all)
OTHER_CHANGES = ("acme_challenges", "managed_certificates", "event_outbox", "nodes",
                 CLOUD_CHANGED)


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
    # tells the other nodes of a committed write (set by ``edgeway serve`` on PostgreSQL)
    publish: Callable[[str], None] | None = None
    # the last requests each endpoint served on this node (the edge adds, the dashboard reads)
    recent: RecentTraffic = field(default_factory=RecentTraffic)

    def __post_init__(self) -> None:
        self.restrictions = Restrictions(self.db)

    def changed(self, collection: str) -> None:
        """A write to ``collection`` committed on this node: drop what was compiled from it,
        here and on the other nodes."""
        self.local(collection)
        if self.publish is not None:
            self.publish(collection)

    def everything(self) -> None:
        """Anything may have changed (announcements from other nodes were missed)."""
        for collection in (*(k.collection for k in catalog.ALL), *OTHER_CHANGES):
            self.local(collection)

    def local(self, collection: str) -> None:
        """A write to ``collection`` committed, here or on another node: this node's part."""
        if collection in RESTRICTION_KINDS:
            self.restrictions.invalidate()
        for watch in self.watchers:
            watch(collection)
