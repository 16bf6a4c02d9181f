"""Reading a public HTTP client: its next event from the request parser, within a time limit
kept by one timer per connection; a whole body, for modules that must see it first, or one
streamed to the upstream (``pump_body``); and watching it while its request is answered, to
stop the upstream when it leaves."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Final

from edgeway.edge import h1
from edgeway.edge.h1 import End, RequestParser
from edgeway.edge.hooks import Exchange
from edgeway.tunnel.pipes import Pipe, UpstreamGone

BODY_TIMEOUT: Final = 60.0  # between two reads of a request body
DRAIN_LIMIT: Final = 1 << 20  # body bytes of a request answered locally read and dropped at most
WATCH_AFTER: Final = 1.0  # an answer slower than this: the client is watched while it comes
WATCH_LIMIT: Final = 1 << 16  # pipelined bytes read ahead meanwhile


class Deadline:
    """A time limit on waiting for the client, as one timer per connection that is moved
    rather than a timer made and cancelled per request: when it passes while armed, the
    connection is aborted (the read waiting on it ends)."""

    __slots__ = ("_at", "_handle", "_loop", "_transport", "watch")

    def __init__(self, transport: asyncio.WriteTransport) -> None:
        self._loop, self._transport = asyncio.get_running_loop(), transport
        self._at: float | None = None
        self._handle: asyncio.TimerHandle | None = None
        self.watch: ClientWatch | None = None  # the connection's, once a request waited

    def arm(self, seconds: float) -> None:
        self._at = self._loop.time() + seconds
        if self._handle is not None and self._handle.when() > self._at:
            self._handle.cancel()  # sooner than the timer set: move it forward
            self._handle = None
        if self._handle is None:
            self._handle = self._loop.call_at(self._at, self._fire)

    def disarm(self) -> None:
        self._at = None

    def cancel(self) -> None:
        self._at = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self.watch is not None:
            self.watch.close()

    def _fire(self) -> None:
        self._handle = None
        if self._at is None:
            return
        if self._loop.time() < self._at:  # moved since: wait for the new time
            self._handle = self._loop.call_at(self._at, self._fire)
            return
        self._transport.abort()


def certified_client(writer: asyncio.StreamWriter) -> bool:
    """The client showed a certificate in the TLS handshake (which checked it)."""
    tls = writer.get_extra_info("ssl_object")
    return tls is not None and bool(tls.getpeercert())


async def next_event(parser: RequestParser, reader: asyncio.StreamReader,
                     deadline: Deadline | None = None, seconds: float = 0.0,
                     head_seconds: float | None = None) -> h1.Event | None:
    """The client's next event; None once it closed its side (or the deadline passed).
    ``seconds``: how long to wait; ``head_seconds``: once a request begins to arrive, its head
    must be whole within that many seconds of its first byte (a slow client is cut then)."""
    event = parser.next_event()
    if event is not None:
        return event
    if deadline is not None:
        deadline.arm(seconds)
    started = parser.mid_message
    try:
        while (event := parser.next_event()) is None:
            data = await reader.read(65536)
            if not data:
                return None
            parser.feed(data)
            if not started and parser.mid_message:
                started = True
                if head_seconds is not None and deadline is not None:
                    deadline.arm(head_seconds)
    finally:
        if deadline is not None:
            deadline.disarm()
    return event


async def read_body(parser: RequestParser, reader: asyncio.StreamReader, limit: int
                    ) -> bytes | None:
    """The rest of the current request's body, whole (its End taken too); None if it is
    longer than ``limit`` or the client left first."""
    body = bytearray()
    while True:
        event = await next_event(parser, reader)
        if isinstance(event, End):
            return bytes(body)
        if not isinstance(event, bytes):
            return None
        body += event
        if len(body) > limit:
            return None


class ClientGone(Exception):
    """The public client closed its connection while its request was being answered."""


class ClientWatch:
    """While a bodiless request waits for its answer: if that takes more than
    ``WATCH_AFTER`` seconds, read what the client sends meanwhile (pipelined requests, parsed
    and kept for after, up to ``WATCH_LIMIT`` bytes) and abort the upstream if the client
    leaves, as a proxy does: nobody is left to answer, and the agent's stream and its local
    connection would otherwise wait on. One per public connection (``Deadline.watch``), its
    one timer moved rather than made per request (most answers come sooner), and a task
    only once an answer is that slow."""

    __slots__ = ("_at", "_handle", "_loop", "_parser", "_reader", "_upstream", "task")

    def __init__(self, parser: RequestParser, reader: asyncio.StreamReader) -> None:
        self._loop = asyncio.get_running_loop()
        self._parser, self._reader = parser, reader
        self._upstream: Pipe | None = None
        self._at: float | None = None
        self._handle: asyncio.TimerHandle | None = None
        self.task: asyncio.Task[None] | None = None

    def begin(self, upstream: Pipe) -> None:
        """A request waits for its answer from ``upstream`` from now."""
        self._upstream, self.task = upstream, None
        self._at = self._loop.time() + WATCH_AFTER
        if self._handle is None:
            self._handle = self._loop.call_at(self._at, self._fire)

    def _fire(self) -> None:
        self._handle = None
        at, upstream = self._at, self._upstream
        if at is None or upstream is None:
            return
        if self._loop.time() < at:  # a later request's: wait for its time
            self._handle = self._loop.call_at(at, self._fire)
            return
        self._at = None
        self.task = asyncio.create_task(self._watch(self._parser, self._reader, upstream))

    @staticmethod
    async def _watch(parser: RequestParser, reader: asyncio.StreamReader,
                     upstream: Pipe) -> None:
        taken = 0
        while taken < WATCH_LIMIT:
            try:
                data = await reader.read(65536)
            except (ConnectionError, OSError):
                data = b""
            if not data:
                upstream.abort()
                raise ClientGone
            parser.feed(data)
            taken += len(data)

    def end(self) -> bool:
        """The answer came (or failed); whether the watch had started (``await stop()``
        then)."""
        self._at, self._upstream = None, None
        return self.task is not None

    async def stop(self) -> None:
        """End the watch that had started (after ``end``)."""
        task, self.task = self.task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    def close(self) -> None:
        """The connection ended: no timer left holding it."""
        self._at = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


async def pump_body(parser: RequestParser, reader: asyncio.StreamReader, x: Exchange,
                    pipe: Pipe, deadline: Deadline, timeout: float) -> None:
    """The request body from the client to the upstream's ``pipe``. If it fails (malformed,
    the client left or stalled ``timeout`` seconds), the upstream is aborted: it will not get
    a whole request, and the relay waiting for its answer learns at once."""
    framer = h1.Framer(h1.chunked(x.req.headers))
    try:
        while True:
            event = await next_event(parser, reader, deadline, timeout)
            if isinstance(event, bytes):
                x.received += len(event)
                await pipe.write(framer.data(event))
            elif isinstance(event, End):
                if framer.chunked:
                    await pipe.write(framer.end(event.trailers))
                return
            else:
                raise UpstreamGone("the client closed the connection mid-request")
    except BaseException:
        pipe.abort()
        raise


async def drain(parser: RequestParser, reader: asyncio.StreamReader, deadline: Deadline,
                timeout: float) -> bool:
    """Read and drop the rest of a request answered locally; False: close instead (it is
    malformed, or longer than ``DRAIN_LIMIT``)."""
    seen = 0
    while True:
        try:
            event = await next_event(parser, reader, deadline, timeout)
        except h1.BadMessage:
            return False
        if isinstance(event, End):
            return True
        if not isinstance(event, bytes):
            return False
        seen += len(event)
        if seen > DRAIN_LIMIT:
            return False
