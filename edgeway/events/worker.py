"""The delivery worker of a node: sends what waits in the outbox (``store/outbox.py``) to the
destinations' targets, at least once and in order per destination.

Every change this node commits wakes it, and it looks every ``POLL`` seconds for what other
nodes (or the ``api-keys`` command) wrote. For each destination with a backlog it takes the
destination's lease (``outbox.claim``: one node at a time delivers a destination, renewed
before every call and every few seconds while waiting) and sends its oldest events, a batch
per call of the target's API. A delivered batch is deleted; a failed one stays, and is tried
again after a back-off that doubles from ``--events-retry`` seconds up to five minutes. The
error is kept on the destination (the API shows it with the backlog and the last success)
and logged. After ``--events-attempts`` failed attempts the batch's events become dead
letters, listed by the API and sent again on request, and the next batch goes on. A node that
dies holding a lease lets it run out (``LEASE`` seconds); another node then carries on where
the outbox says, so events sent before the crash but not yet deleted are sent again.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Coroutine, Iterable
from itertools import islice
from typing import Any

import structlog

from edgeway import catalog
from edgeway.config import EventsConfig
from edgeway.events.destinations import DeliveryError, Target
from edgeway.events.envelope import stamp
from edgeway.events.targets import Targets, attempt
from edgeway.store import outbox
from edgeway.store.db import Database, DatabaseUnavailable
from edgeway.store.repo import Repo

log = structlog.get_logger()
DESTINATIONS = catalog.BY_COLLECTION["event_destinations"]
POLL = 1.0  # seconds between looks for work other nodes wrote
LEASE = 30.0  # seconds a destination stays this node's without renewal
MAX_BACKOFF = 300.0


def backoff(options: EventsConfig, attempts: int) -> float:
    """Seconds before attempt ``attempts + 1``: doubling, capped, with 10% jitter."""
    base = min(MAX_BACKOFF, options.retry * 2.0 ** max(0, attempts - 1))
    return float(base * random.uniform(0.9, 1.1))


def batch_size(bodies: Iterable[str], target: Target) -> int:
    """How many of ``bodies`` at their head make one call to the target (at least one)."""
    size = n = 0
    for body in islice(bodies, target.max_batch):
        size += len(body) + 64
        if n and size > target.max_bytes:
            break
        n += 1
    return n


class Worker:
    def __init__(self, db: Database, targets: Targets, node: str,
                 options: EventsConfig) -> None:
        self.db, self.targets, self.node, self.options = db, targets, node, options
        self._wake = asyncio.Event()
        self._poke = asyncio.Event()  # set when a destination changed (ends back-off waits)
        self._active: dict[str, asyncio.Task[None]] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    def changed(self, collection: str) -> None:
        self._wake.set()
        if collection == "event_destinations":
            poke, self._poke = self._poke, asyncio.Event()
            poke.set()

    async def stop(self) -> None:
        held = list(self._active)
        tasks = [t for t in (self._task, *self._active.values()) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        with contextlib.suppress(Exception):  # let another node carry on at once
            async with self.db.write() as tx:
                for dest in held:
                    await outbox.release(tx, dest, self.node)

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), POLL)
            self._wake.clear()
            try:
                await self._look()
            except DatabaseUnavailable as exc:
                log.warning("event_delivery_store_unavailable", error=str(exc))

    async def _look(self) -> None:
        docs = dict(await Repo(self.db.reader()).all_docs(DESTINATIONS))
        self.targets.keep(set(docs))
        idle = [d for d in docs if d not in self._active]
        for dest in await outbox.backlogged(self.db.reader(), idle):
            self._spawn(dest, self._deliver(dest))

    def _spawn(self, dest: str, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._active[dest] = task
        task.add_done_callback(
            lambda t: self._active.pop(dest) if self._active.get(dest) is t else None)

    async def _claim(self, dest: str) -> tuple[int, float] | None:
        async with self.db.write() as tx:
            return await outbox.claim(tx, self.db.dialect, dest, self.node, time.time(), LEASE)

    async def _deliver(self, dest: str) -> None:
        """Deliver ``dest``'s backlog while this node holds its lease."""
        try:
            while (lease := await self._claim(dest)) is not None:
                attempts, next_at = lease
                wait = next_at - time.time()
                if wait > 0:  # backing off: keep the lease meanwhile
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._poke.wait(), min(wait, LEASE / 3))
                    continue
                if not await self._one_batch(dest, attempts):
                    async with self.db.write() as tx:
                        await outbox.release(tx, dest, self.node)
                    return
        except DatabaseUnavailable as exc:
            log.warning("event_delivery_store_unavailable", destination=dest, error=str(exc))

    async def _one_batch(self, dest: str, attempts: int) -> bool:
        """Send the next batch; False when there was none (or the destination is gone)."""
        repo = Repo(self.db.reader())
        doc = await repo.get(DESTINATIONS, dest)
        if doc is None:
            return False
        try:
            target = self.targets.of(dest, doc)
        except DeliveryError as exc:
            pending = await outbox.head(self.db.reader(), dest, 100)
            await self._failed(dest, pending, attempts, exc)
            return bool(pending)
        pending = await outbox.head(self.db.reader(), dest, target.max_batch)
        pending = pending[:batch_size((p.body for p in pending), target)]
        if not pending:
            return False
        events = [p.body for p in pending]
        try:
            await attempt(target, events, self.options.timeout * 3)
        except DeliveryError as exc:
            await self._failed(dest, pending, attempts, exc)
            return True
        async with self.db.write() as tx:
            await outbox.delivered(tx, dest, pending, stamp(time.time()))
        if attempts:
            log.info("event_delivery_recovered", destination=dest, after_attempts=attempts)
        return True

    async def _failed(self, dest: str, pending: list[outbox.Pending], attempts: int,
                      exc: DeliveryError) -> None:
        now = time.time()
        done, rest = pending[:exc.accepted], pending[exc.accepted:]
        attempts = 1 if done else attempts + 1
        async with self.db.write() as tx:
            if done:
                await outbox.delivered(tx, dest, done, stamp(now))
            if attempts >= self.options.attempts:
                await outbox.bury(tx, dest, rest, str(exc), attempts, stamp(now))
                await outbox.failed(tx, dest, 0, 0.0, str(exc), stamp(now))
            else:
                await outbox.failed(tx, dest, attempts, now + backoff(self.options, attempts),
                                    str(exc), stamp(now))
        if attempts >= self.options.attempts:
            log.error("event_dead_lettered", destination=dest, events=len(rest),
                      attempts=attempts, error=str(exc))
        else:
            log.warning("event_delivery_failed", destination=dest, events=len(rest),
                        attempt=attempts, permanent=exc.permanent, error=str(exc))
