"""Backends, compiled once per routing snapshot from their stored documents: what each one
picks when a request or connection comes (``pick``): a live tunnel of a tunnel group (by
labels, from the registry at that moment), a fixed HTTP answer, a static address, the first
live backend of a failover list, or a weighted draw among the live ones."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from edgeway.edge.pages import Fixed
from edgeway.tunnel.registry import Registry, Tunnel

MAX_DEPTH = 16  # backends nest (failover and weighted name others); cycles are cut here


@dataclass(frozen=True)
class Static:
    host: str
    port: int
    tls: bool


Target = Tunnel | Static | Fixed


class Backend(Protocol):
    def pick(self, backends: Mapping[str, Backend], registry: Registry,
             depth: int) -> Target | None: ...


def pick(backends: Mapping[str, Backend], backend_id: str, registry: Registry,
         depth: int = 0) -> Target | None:
    """The target backend ``backend_id`` picks now; None when nothing behind it is live."""
    found = backends.get(backend_id)
    if found is None or depth > MAX_DEPTH:
        return None
    return found.pick(backends, registry, depth)


@dataclass(frozen=True)
class TunnelGroup:
    labels: dict[str, str]

    def pick(self, backends: Mapping[str, Backend], registry: Registry,
             depth: int) -> Target | None:
        return registry.pick(registry.with_labels(self.labels))


@dataclass(frozen=True)
class Answer:
    answer: Fixed

    def pick(self, backends: Mapping[str, Backend], registry: Registry,
             depth: int) -> Target | None:
        return self.answer


@dataclass(frozen=True)
class Address:
    target: Static

    def pick(self, backends: Mapping[str, Backend], registry: Registry,
             depth: int) -> Target | None:
        return self.target


@dataclass(frozen=True)
class Failover:
    children: tuple[str, ...]

    def pick(self, backends: Mapping[str, Backend], registry: Registry,
             depth: int) -> Target | None:
        for child in self.children:
            target = pick(backends, child, registry, depth + 1)
            if target is not None:
                return target
        return None


@dataclass(frozen=True)
class Weighted:
    weights: tuple[tuple[str, int], ...]  # (backend id, weight > 0)

    def pick(self, backends: Mapping[str, Backend], registry: Registry,
             depth: int) -> Target | None:
        weights = dict(self.weights)
        while weights:  # draw among the live ones
            choice = random.choices(list(weights), list(weights.values()))[0]
            target = pick(backends, choice, registry, depth + 1)
            if target is not None:
                return target
            del weights[choice]
        return None


def compile_backend(collection: str, doc: dict[str, Any]) -> Backend:
    """A stored backend (of ``backends/<type>``) as the object that picks for it."""
    if collection == "backends/tunnel_group":
        return TunnelGroup(dict(doc.get("labels") or {}))
    if collection == "backends/http_response":
        return Answer(Fixed(int(doc.get("status_code", 200)),
                            tuple((doc.get("headers") or {}).items()),
                            str(doc.get("body", "")).encode()))
    if collection == "backends/static":
        host, _, port = str(doc["address"]).rpartition(":")
        return Address(Static(host.strip("[]"), int(port),
                              bool((doc.get("tls") or {}).get("enabled"))))
    if collection == "backends/failover":
        return Failover(tuple(doc.get("backends") or ()))
    return Weighted(tuple((k, w) for k, w in (doc.get("backends") or {}).items() if w > 0))


def tunnels_behind(backends: Mapping[str, Backend], backend_id: str, registry: Registry,
                   depth: int = 0) -> list[Tunnel] | None:
    """Every live tunnel backend ``backend_id`` may pick now; None when it may pick anything
    else (a fixed answer, a static address) or names a backend that is not there."""
    found = backends.get(backend_id)
    if found is None or depth > MAX_DEPTH:
        return None
    if isinstance(found, TunnelGroup):
        return registry.with_labels(found.labels)
    children = found.children if isinstance(found, Failover) else \
        tuple(child for child, _ in found.weights) if isinstance(found, Weighted) else None
    if children is None:
        return None
    tunnels: list[Tunnel] = []
    for child in children:
        behind = tunnels_behind(backends, child, registry, depth + 1)
        if behind is None:
            return None
        tunnels += behind
    return tunnels
