"""Traffic events (``http_request_complete.v0``, ``tcp_connection_closed.v0``): the sink the
HTTP edge and the TCP listeners hand what happened to (``emit``), and their delivery.

Off the request path: ``emit`` only appends to a bounded queue (``--events-queue``). Every
``TICK`` seconds the queue is routed (the subscriptions' filters and fields, compiled once,
``routing.py``), ``CHUNK`` events at a time with the loop serving traffic in between, into
one sender per destination, which sends batches in order with the same back-off and attempts
as the outbox (``worker.py``), and dead-letters a batch that failed them all. A sender
waiting for its target holds at most ``--events-queue`` events; beyond that, and when the
node's queue is full, events are dropped and counted: the log says so
(``event_traffic_dropped``) and the destination's ``delivery.dropped`` counts them. So a slow
or dead target costs traffic nothing but the events it cannot take. Traffic events are not
written to the database before they are sent: a crash loses those waiting in memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from itertools import islice
from typing import Any

import msgspec
import structlog

from edgeway.config import EventsConfig
from edgeway.events import destinations, envelope, routing
from edgeway.events.destinations import DeliveryError
from edgeway.events.targets import Targets, attempt
from edgeway.events.worker import DESTINATIONS, backoff, batch_size
from edgeway.store import outbox
from edgeway.store.db import Database, DatabaseUnavailable
from edgeway.store.repo import Repo

log = structlog.get_logger()
TICK = 0.2  # seconds between routing rounds of the queue
CHUNK = 64  # events routed at a time (then the event loop runs other work)
ROUND = 10_000  # events routed before the senders have them, at most
REPORT = 5.0  # seconds between counts written to the database (and reloads of the routing)
WATCHED = ("event_subscriptions", "event_destinations")
# what makes a traffic event's object (a msgspec struct) of the tuple the listener queued
Build = Callable[[tuple[Any, ...]], msgspec.Struct]
_encode = msgspec.json.Encoder().encode


class Sender:
    """One destination's traffic events, sent in order."""

    def __init__(self, sink: TrafficSink, dest: str) -> None:
        self.sink, self.dest = sink, dest
        # envelopes as JSON text (strings: the garbage collector does not track them)
        self.queue: deque[str] = deque()
        self.ready = asyncio.Event()
        self.sent = self.dropped = 0  # since the last report
        self.success_at: str | None = None
        self.task = asyncio.create_task(self._run())

    def put(self, items: list[str]) -> None:
        room = self.sink.options.queue - len(self.queue)
        if len(items) > room:
            self.dropped += len(items) - max(room, 0)
            items = items[:max(room, 0)]
        self.queue.extend(items)
        if items:
            self.ready.set()

    async def _run(self) -> None:
        while True:
            await self.ready.wait()
            self.ready.clear()
            while self.queue:
                await self._batch()

    async def _batch(self) -> None:
        attempts = 0
        while True:
            doc = self.sink.docs.get(self.dest)
            if doc is None:  # the destination is gone
                self.queue.clear()
                return
            batch = list(islice(self.queue, 100))
            try:
                target = self.sink.targets.of(self.dest, doc)
                batch = list(islice(self.queue, batch_size(self.queue, target)))
                await attempt(target, batch, self.sink.options.timeout * 3)
            except DeliveryError as exc:
                attempts += 1
                if await self.sink.failed(self.dest, batch, attempts, exc):
                    self._take(len(batch))
                    return
                await asyncio.sleep(backoff(self.sink.options, attempts))
                continue
            self._take(len(batch))
            self.sent += len(batch)
            self.success_at = envelope.stamp(time.time())
            return

    def _take(self, n: int) -> None:
        for _ in range(min(n, len(self.queue))):
            self.queue.popleft()


class TrafficSink:
    def __init__(self, db: Database, targets: Targets, options: EventsConfig) -> None:
        self.db, self.targets, self.options = db, targets, options
        self.routing = routing.Routing({})
        self.docs: dict[str, dict[str, Any]] = {}
        # (event type, when, what to make its object of): plain values only, so the garbage
        # collector soon stops tracking them
        self._queue: deque[tuple[str, float, tuple[Any, ...]]] = deque()
        self._builds: dict[str, Build] = {}  # event type -> how its object is made
        self._dropped: dict[str, int] = {}  # destination -> dropped from the node's queue
        self._unrouted: dict[str, int] = {}  # event type -> dropped while the sink was stale
        self._senders: dict[str, Sender] = {}
        self._round: dict[str, list[str]] = {}  # destination -> its events routed this round
        self._routed = 0  # events taken from the queue this round
        self._tasks: list[asyncio.Task[None]] = []
        self._stale = True  # this node changed subscriptions: not reloaded yet
        self._changes = 0  # changes this node made (a reload that began before one is stale)
        self._refresh = False  # time to look for changes made through other nodes

    def wants(self, event_type: str) -> bool:
        """Whether any subscription takes ``event_type`` (else do not even build it). While
        subscriptions changed and are not reloaded yet, every event is queued: the next
        round routes it by what they are now, so an event that happens after a change
        (a subscription's 201) is routed by it."""
        return self._stale or event_type in self.routing.by_type

    def emit(self, event_type: str, build: Build, record: tuple[Any, ...]) -> None:
        """Queue one traffic event: its object is ``build(record)``, made off the request path
        (never waits; drops, counted, when the queue is full)."""
        if len(self._queue) >= self.options.queue:
            if self._stale:  # (counted for the routes of the subscriptions once read)
                self._unrouted[event_type] = self._unrouted.get(event_type, 0) + 1
            else:
                self._count_dropped(event_type, 1)
            return
        self._builds[event_type] = build
        self._queue.append((event_type, time.time(), record))

    def _count_dropped(self, event_type: str, n: int) -> None:
        for route in self.routing.routes(event_type):
            self._dropped[route.destination_id] = self._dropped.get(route.destination_id, 0) + n

    def changed(self, collection: str) -> None:
        if collection in WATCHED:
            self._stale = True
            self._changes += 1

    async def start(self) -> None:
        await self._reload()
        self._tasks = [asyncio.create_task(self._route_every()),
                       asyncio.create_task(self._report_every())]

    async def stop(self, drain: float = 2.0) -> None:
        """Send what is queued, for at most ``drain`` seconds (a target that is down keeps
        it: those events are lost), then stop. What is queued is routed by the subscriptions
        as they are now: a change made just before the stop is read first."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        if self._stale:
            with contextlib.suppress(DatabaseUnavailable, TimeoutError):
                await asyncio.wait_for(self._reload(), drain)
        self.route()
        deadline = time.monotonic() + drain
        while any(s.queue for s in self._senders.values()) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        tasks = [s.task for s in self._senders.values()]  # (the routing tasks ended above)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        with contextlib.suppress(Exception):
            await self._report()

    async def _reload(self) -> None:
        """The subscriptions and destinations as they are now, both put in place at once.
        Until then ``wants`` goes on queueing every event (an event that ends while this
        reads is routed by what it reads), and a change made while it reads (it may not
        have seen it) leaves the sink stale, to read again."""
        changes, self._refresh = self._changes, False
        try:
            repo = Repo(self.db.reader())
            new = await routing.load(repo)
            docs = dict(await repo.all_docs(DESTINATIONS))
        except BaseException:
            self._stale = True
            raise
        self.routing, self.docs = new, docs
        unrouted, self._unrouted = self._unrouted, {}
        for event_type, n in unrouted.items():
            self._count_dropped(event_type, n)
        if self._changes == changes:
            self._stale = False

    async def _route_every(self) -> None:
        while True:
            await asyncio.sleep(TICK)
            more = reachable = True
            while more:  # (the loop serves traffic between slices, and may change
                # subscriptions: what is queued after a change is routed by it)
                try:
                    while reachable and (self._stale or self._refresh):
                        await self._reload()
                except DatabaseUnavailable:  # (routed as before; read again next round)
                    reachable = False
                if more := self.route(CHUNK):
                    await asyncio.sleep(0)

    def route(self, limit: int | None = None) -> bool:
        """The queue (at most ``limit`` events of it) to the destinations' senders, once it
        is empty: an event's envelope is encoded once per choice of fields among the routes
        its filters let through. Whether events are left."""
        queue = self._queue
        take = queue.popleft
        by_type, whole = self.routing.by_type, self.routing.whole
        builds, head = self._builds, envelope.new_event_id.head
        out = self._round
        n = len(queue) if limit is None else min(limit, len(queue))
        self._routed += n
        for _ in range(n):
            event_type, when, record = take()
            dest = whole.get(event_type)
            if dest is not None:  # (the common case, made short)
                events = out.get(dest)
                if events is None:
                    events = out[dest] = []
                text = _encode(builds[event_type](record)).decode()
                events.append(f"{head(event_type, when)}{text}}}")
                continue
            routes = by_type.get(event_type)
            if not routes:
                continue
            obj = builds[event_type](record)
            start, variables = head(event_type, when), msgspec.to_builtins(obj)
            bodies: dict[tuple[str, ...], str] = {}
            for route in routes:
                if not route.passes(variables):
                    continue
                body = bodies.get(route.fields)
                if body is None:
                    body = bodies[route.fields] = \
                        start + envelope.encode(envelope.select(variables, route.fields)) + "}"
                out.setdefault(route.destination_id, []).append(body)
        if queue and self._routed < ROUND:
            return True
        # the round is routed: to the senders at once (so that they send full batches)
        self._round, self._routed = {}, 0
        for dest, events in out.items():
            self._sender(dest).put(events)
        return False

    def _sender(self, dest: str) -> Sender:
        sender = self._senders.get(dest)
        if sender is None:
            sender = self._senders[dest] = Sender(self, dest)
        return sender

    async def failed(self, dest: str, batch: list[str], attempts: int,
                     exc: DeliveryError) -> bool:
        """A batch failed; True once it is given up (its events are dead letters now)."""
        now = time.time()
        buried = attempts >= self.options.attempts
        try:
            async with self.db.write() as tx:
                if buried:
                    dead = [outbox.Pending(0, destinations.event_id(b),
                                           destinations.event_type(b), b) for b in batch]
                    await outbox.bury(tx, dest, dead, str(exc), attempts, envelope.stamp(now))
                await outbox.failed(tx, dest, 0 if buried else attempts, 0.0, str(exc),
                                    envelope.stamp(now))
        except DatabaseUnavailable as err:
            log.warning("event_delivery_store_unavailable", destination=dest, error=str(err))
        if buried:
            log.error("event_dead_lettered", destination=dest, events=len(batch),
                      attempts=attempts, error=str(exc), traffic=True)
        else:
            log.warning("event_delivery_failed", destination=dest, events=len(batch),
                        attempt=attempts, permanent=exc.permanent, error=str(exc),
                        traffic=True)
        return buried

    async def _report_every(self) -> None:
        while True:
            await asyncio.sleep(REPORT)
            self._refresh = True  # (subscriptions changed through another node)
            with contextlib.suppress(DatabaseUnavailable):
                await self._report()

    async def _report(self) -> None:
        """Counts since the last report to the destinations' delivery state and the log."""
        dropped, self._dropped = self._dropped, {}
        counts: dict[str, tuple[int, int, str | None]] = {}
        for dest, sender in self._senders.items():
            counts[dest] = (sender.sent, sender.dropped + dropped.pop(dest, 0),
                            sender.success_at)
            sender.sent = sender.dropped = 0
            sender.success_at = None
        counts.update({d: (0, n, None) for d, n in dropped.items()})
        counts = {d: c for d, c in counts.items() if c[0] or c[1] or c[2]}
        if not counts:
            return
        async with self.db.write() as tx:
            for dest, (sent, lost, when) in counts.items():
                await outbox.counted(tx, dest, sent, lost, when)
        for dest, (_sent, lost, _when) in counts.items():
            if lost:
                queued = len(self._senders[dest].queue) if dest in self._senders else 0
                log.warning("event_traffic_dropped", destination=dest, dropped=lost,
                            queued=queued, limit=self.options.queue)

