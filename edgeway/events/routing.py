"""Which destinations an event goes to: the subscriptions' sources, compiled into a table
from event type to routes (a destination, with the source's filter and fields).

Only subscribed types reach a subscription's destinations. A destination reached by several
subscriptions for one type gets the event once: when any of their filters passes, with the
union of their fields (all fields when one of them selects none).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from edgeway import catalog
from edgeway.events.envelope import passes
from edgeway.store.repo import Repo

SUBSCRIPTIONS = catalog.BY_COLLECTION["event_subscriptions"]


@dataclass(frozen=True)
class Route:
    destination_id: str
    filters: tuple[str, ...]  # any one passing lets the event through ("" lets all through)
    fields: tuple[str, ...]  # () sends every field
    always: bool = field(init=False)  # no filter to pass

    def __post_init__(self) -> None:
        object.__setattr__(self, "always", "" in self.filters)

    def passes(self, variables: dict[str, Any]) -> bool:
        return self.always or any(passes(f, variables) for f in self.filters)


@dataclass(frozen=True)
class Routing:
    by_type: dict[str, tuple[Route, ...]]
    # event type -> the destination of its one route when that takes every event whole (no
    # filter, every field): the common case, which the sink routes on a short path
    whole: dict[str, str] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "whole", {
            t: r[0].destination_id for t, r in self.by_type.items()
            if len(r) == 1 and r[0].always and not r[0].fields})

    def wants(self, event_type: str) -> bool:
        return event_type in self.by_type

    def routes(self, event_type: str) -> tuple[Route, ...]:
        return self.by_type.get(event_type, ())

    def destinations(self, event_type: str, variables: dict[str, Any]) -> list[str]:
        """The destinations an event of ``event_type`` goes to, its filters evaluated over
        ``variables``."""
        return [r.destination_id for r in self.routes(event_type) if r.passes(variables)]


def compile_routing(subscriptions: list[tuple[str, dict[str, Any]]]) -> Routing:
    merged: dict[tuple[str, str], tuple[set[str], set[str] | None]] = {}
    for _id, doc in subscriptions:
        for dest in doc.get("destination_ids") or []:
            for src in doc.get("sources") or []:
                filters, fields = merged.setdefault((src["type"], dest), (set(), set()))
                filters.add(src.get("filter") or "")
                chosen = src.get("fields") or []
                if not chosen or fields is None:
                    merged[(src["type"], dest)] = (filters, None)
                else:
                    fields.update(chosen)
    by_type: dict[str, list[Route]] = {}
    for (type_, dest), (filters, fields) in sorted(merged.items()):
        shown = () if fields is None else tuple(sorted(fields))
        by_type.setdefault(type_, []).append(Route(dest, tuple(sorted(filters)), shown))
    return Routing({t: tuple(r) for t, r in by_type.items()})


async def load(repo: Repo) -> Routing:
    return compile_routing(await repo.all_docs(SUBSCRIPTIONS))
