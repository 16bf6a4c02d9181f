"""Change events: the ``Changes`` the API hands its repository (``store/repo.py``), told of
every write of an event kind inside the write's transaction. It renders the resource as the
API does, wraps it in the envelope (``envelope.py``) and writes one outbox row per
subscribed destination in that same transaction: the event commits with the change or not
at all, on SQLite and PostgreSQL alike, so a crash can neither lose one nor emit one for a
change that was rolled back. The delivery worker (``worker.py``) sends them.

The subscriptions are read in the transaction (once, again after it writes subscriptions), so
an event goes to the subscriptions that exist when its change commits.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from edgeway.catalog.event_types import change_type
from edgeway.catalog.model import Kind
from edgeway.events import envelope, routing
from edgeway.store import outbox
from edgeway.store.fetch import Fetcher
from edgeway.store.repo import Repo

Render = Callable[[Kind, str, dict[str, Any], str], dict[str, Any]]
ROUTING_KINDS = ("event_subscriptions", "event_destinations")


class ChangeLog:
    """The change events of one transaction, by ``actor`` (None: the server itself)."""

    def __init__(self, public_url: str, render: Render, actor: dict[str, Any] | None = None,
                 now: float | None = None) -> None:
        self.public_url, self.render, self.actor = public_url, render, actor
        self.now = time.time() if now is None else now
        self.written = 0  # outbox rows written
        self._routing: routing.Routing | None = None

    def wants(self, kind: Kind) -> bool:
        return any(change_type(kind.collection, verb) is not None
                   for verb in ("created", "updated", "deleted"))

    async def record(self, repo: Repo, kind: Kind, verb: str, id_: str,
                     doc: dict[str, Any]) -> None:
        if kind.collection == "event_destinations":
            if verb == "deleted":
                await outbox.forget(repo.tx, id_)
            elif verb == "updated":  # (new credentials, say): a failing batch goes again now
                await outbox.retry_now(repo.tx, id_)
        type_ = change_type(kind.collection, verb)
        if type_ is None:
            return
        if self._routing is None or kind.collection in ROUTING_KINDS:
            self._routing = await routing.load(repo)  # (as this transaction changed them)
        if not self._routing.wants(type_):
            return
        if kind.refresh is not None:  # (members read from other resources, as the API does)
            doc = (await kind.refresh([doc], Fetcher(repo)))[0]
        obj = self.render(kind, id_, doc, self.public_url)
        dests = self._routing.destinations(type_, {"obj": obj, "actor": self.actor})
        if not dests:
            return
        ev = envelope.event(type_, obj, self.actor, self.now)
        await outbox.add(repo.tx, dests, ev["event_id"], type_, envelope.encode(ev), self.now)
        self.written += len(dests)


def actor(key_id: str, owner_id: str) -> dict[str, Any]:
    return {"api_key_id": key_id, "owner_id": owner_id}
