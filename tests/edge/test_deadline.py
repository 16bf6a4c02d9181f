"""The edge's time limits on slow clients, on real sockets: an idle kept-alive connection and
a request head that never completes are closed; a client that keeps sending whole requests is
not (the one timer per connection moves with it)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import pytest

from edgeway.edge import client, h1, http
from edgeway.edge.http import HttpEdge

# the two ways a public connection is answered: ``serve`` (a task reading its stream) and
# ``run`` (from the transport's callbacks, ``fast.Connection``, handing over to ``serve``)
ENTRIES = pytest.mark.parametrize("entry", ["serve", "run"])


async def serve_one(edge: HttpEdge, entry: str = "serve") -> tuple[asyncio.Server, int]:
    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if entry == "run":
            await edge.run(reader, writer, ("127.0.0.1", 1))
        else:
            await edge.serve(reader, writer, ("127.0.0.1", 1))

    server = await asyncio.start_server(client, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def closed_after(port: int, send: bytes) -> float:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    t0 = time.monotonic()
    writer.write(send)
    assert await asyncio.wait_for(reader.read(), 5) == b""  # closed, nothing answered
    writer.close()
    return time.monotonic() - t0


@ENTRIES
@pytest.mark.parametrize("send", [b"", b"GET / HTTP/1.1\r\nHost: slow"])
def test_idle_and_slow_heads_are_closed(monkeypatch: pytest.MonkeyPatch, send: bytes,
                                        entry: str) -> None:
    monkeypatch.setattr(http, "IDLE_TIMEOUT", 0.3)
    monkeypatch.setattr(http, "HEAD_TIMEOUT", 0.3)

    async def main() -> float:
        server, port = await serve_one(HttpEdge(None, "http"), entry)  # type: ignore[arg-type]
        async with server:
            return await closed_after(port, send)

    assert 0.25 < asyncio.run(main()) < 2


class Clock:
    """An event loop's clock and timers, moved by the test alone (no sleep can overrun)."""

    class Handle:
        def __init__(self, when: float, callback: Callable[[], None]) -> None:
            self.at, self.callback, self.cancelled = when, callback, False

        def when(self) -> float:
            return self.at

        def cancel(self) -> None:
            self.cancelled = True

    def __init__(self) -> None:
        self.now = 0.0
        self.handles: list[Clock.Handle] = []

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[[], None]) -> Clock.Handle:
        handle = Clock.Handle(when, callback)
        self.handles.append(handle)
        return handle

    def advance(self, seconds: float) -> None:
        """Move on by ``seconds``, running each timer that falls due, in time order."""
        end = self.now + seconds
        while due := sorted((h for h in self.handles if not h.cancelled and h.at <= end),
                            key=Clock.Handle.when):
            self.handles.remove(due[0])
            self.now = max(self.now, due[0].at)
            due[0].callback()
        self.now = end


def test_a_deadline_moved_before_it_passed_waits_for_the_new_time() -> None:
    aborted: list[float] = []
    clock = Clock()

    class Transport(asyncio.WriteTransport):
        def abort(self) -> None:
            aborted.append(clock.now)

    async def make() -> client.Deadline:
        return client.Deadline(Transport())

    deadline = asyncio.run(make())
    deadline._loop = clock  # type: ignore[assignment]  # (its timers, on the test's clock)
    deadline.arm(0.1)
    clock.advance(0.05)
    deadline.arm(0.2)  # a new wait began: its limit counts from now (0.25)
    clock.advance(0.1)  # past the first limit (0.1): not fired, it moved
    assert not aborted
    deadline.disarm()  # the request arrived: nothing fires at the old time
    clock.advance(0.2)
    assert not aborted
    deadline.arm(0.1)  # at 0.35: fires at 0.45, not before
    clock.advance(0.09)
    assert not aborted
    clock.advance(0.02)
    assert aborted == [pytest.approx(0.45)]


async def drip(port: int, data: bytes, every: float) -> float:
    """Send ``data`` a byte at a time; the seconds from the first byte until the edge closed
    the connection (it answers nothing: the head never completes)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    t0 = time.monotonic()

    async def send() -> None:
        for b in data:
            writer.write(bytes([b]))
            await asyncio.sleep(every)

    sender = asyncio.create_task(send())
    try:
        # (closed, or reset: the edge aborts while bytes it never read are in flight)
        with contextlib.suppress(ConnectionResetError):
            assert await asyncio.wait_for(reader.read(), 10) == b""
    finally:
        sender.cancel()
        writer.close()
    return time.monotonic() - t0


@ENTRIES
def test_a_head_sent_slowly_is_cut_at_the_head_limit_not_the_idle_one(
        monkeypatch: pytest.MonkeyPatch, entry: str) -> None:
    """Slow-loris on a new connection: the head must be whole within the head limit (each
    byte that arrives does not move it)."""
    monkeypatch.setattr(http, "IDLE_TIMEOUT", 5.0)
    monkeypatch.setattr(http, "HEAD_TIMEOUT", 0.4)

    async def main() -> float:
        server, port = await serve_one(HttpEdge(None, "http"), entry)  # type: ignore[arg-type]
        async with server:
            return await drip(port, b"GET / HTTP/1.1\r\nHost: slow\r\nX-A: " + b"a" * 100,
                              0.05)

    assert 0.35 < asyncio.run(main()) < 2


def test_a_head_that_starts_after_an_idle_wait_gets_the_head_limit_from_its_first_byte(
        ) -> None:
    """On a kept-alive connection the wait for the next request is the idle limit; once a
    head begins, it must be whole within the head limit of its first byte."""
    async def main() -> float:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[float] = loop.create_future()

        async def edge_side(reader: asyncio.StreamReader, writer: asyncio.StreamWriter
                            ) -> None:
            deadline = client.Deadline(writer.transport)
            event = await client.next_event(h1.RequestParser(), reader, deadline, 5.0, 0.3)
            done.set_result(loop.time())
            assert event is None  # cut: the client was too slow
            writer.close()

        server = await asyncio.start_server(edge_side, "127.0.0.1", 0)
        async with server:
            _, writer = await asyncio.open_connection("127.0.0.1",
                                                      server.sockets[0].getsockname()[1])
            await asyncio.sleep(0.5)  # idle, within the idle limit
            first = loop.time()
            for b in b"GET / HTTP/1.1\r\nHost: x\r\n":
                if done.done():
                    break
                writer.write(bytes([b]))
                await asyncio.sleep(0.05)
            cut = await asyncio.wait_for(done, 5)
            writer.close()
        return cut - first

    assert 0.25 < asyncio.run(main()) < 2.0  # (5 s, the idle limit, without the head limit)
