"""The targets of this node's destinations: made from the stored destination (again when it
changes), sharing one HTTP client (with ``--events-ca-file`` trusted besides the system's
CAs) and the AWS thread pool; and ``verify``, which sends one real test event."""

from __future__ import annotations

import asyncio
import ssl
import threading
import time
from collections.abc import Sequence
from typing import Any

import certifi
import httpx
import msgspec
import structlog

from edgeway.catalog.event_types import TEST
from edgeway.config import EventsConfig
from edgeway.events import envelope
from edgeway.events.destinations import DeliveryError, Target, build, chosen
from edgeway.pki.seal import Sealer, SealError

log = structlog.get_logger()


class Clients:
    """What the targets of a node share: one HTTP client (synchronous, used from the
    targets' thread pool; httpx clients are thread-safe)."""

    def __init__(self, options: EventsConfig, node: str) -> None:
        self.options, self.node = options, node
        self._http: httpx.Client | None = None
        self._lock = threading.Lock()

    def http(self) -> httpx.Client:
        with self._lock:
            if self._http is None:
                context = ssl.create_default_context(cafile=certifi.where())
                if self.options.ca_file is not None:
                    context.load_verify_locations(cafile=str(self.options.ca_file))
                self._http = httpx.Client(verify=context, timeout=self.options.timeout,
                                          trust_env=False)
            return self._http

    async def close(self) -> None:
        if self._http is not None:
            self._http.close()


class Targets:
    """destination id -> its target, made again when the destination's document changes."""

    def __init__(self, sealer: Sealer, clients: Clients) -> None:
        self.sealer, self.clients = sealer, clients
        self._made: dict[str, tuple[bytes, Target]] = {}

    def of(self, dest_id: str, doc: dict[str, Any]) -> Target:
        key = msgspec.json.encode(doc.get("target"))
        made = self._made.get(dest_id)
        if made is None or made[0] != key:
            try:
                target = build(doc["target"], self.sealer, self.clients)
            except SealError as exc:
                raise DeliveryError(f"cannot open the destination's secret: {exc}",
                                    permanent=True) from None
            made = self._made[dest_id] = (key, target)
        return made[1]

    def keep(self, dest_ids: set[str]) -> None:
        for gone in set(self._made) - dest_ids:
            del self._made[gone]


async def attempt(target: Target, events: Sequence[str], timeout: float) -> str:
    """One call to a target, bounded in time; every failure a ``DeliveryError``."""
    try:
        return await asyncio.wait_for(target.send(events), timeout)
    except DeliveryError:
        raise
    except TimeoutError:
        raise DeliveryError(f"the target did not answer within {timeout:g} s") from None
    except Exception as exc:  # (a target's unforeseen failure must not end delivery)
        raise DeliveryError(f"{type(exc).__name__}: {exc}") from None


async def verify(targets: Targets, dest_id: str, doc: dict[str, Any]) -> dict[str, Any]:
    """Send a real test event to the destination's target; what it answered."""
    kind, _ = chosen(doc["target"])
    obj = {"destination": {"id": dest_id}, "message": "a test event from Edgeway"}
    ev = envelope.event(TEST, obj, None)
    started = time.monotonic()
    try:
        target = targets.of(dest_id, doc)
        answer = await attempt(target, [envelope.encode(ev)],
                               targets.clients.options.timeout * 2)
    except DeliveryError as exc:
        log.info("event_destination_verify_failed", destination=dest_id, error=str(exc))
        return {"delivered": False, "target": kind, "event_id": ev["event_id"],
                "answer": str(exc), "permanent": exc.permanent,
                "ms": round((time.monotonic() - started) * 1000, 1)}
    return {"delivered": True, "target": kind, "event_id": ev["event_id"], "answer": answer,
            "permanent": False, "ms": round((time.monotonic() - started) * 1000, 1)}
