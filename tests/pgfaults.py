"""PostgreSQL faults for tests, without disturbing the shared server: terminate the backends
of one database, or put a TCP link between the code under test and the server that can be cut
(connections reset, as an outage looks) or blackholed (nothing answers and nothing is reset,
as a network partition or a dead host looks)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine
from typing import Any
from urllib.parse import urlsplit

import asyncpg

from tests.server import PG_URL, free_port


async def terminate(dbname: str) -> int:
    """Terminate every backend of ``dbname`` (but ours) and wait until each has exited;
    returns how many there were."""
    conn = await asyncpg.connect(PG_URL)
    try:
        pids: list[int] = await conn.fetchval(
            "WITH victims AS MATERIALIZED (SELECT pid FROM pg_stat_activity "
            "WHERE datname = $1 AND pid <> pg_backend_pid()) "
            "SELECT coalesce(array_agg(pid), '{}') FROM victims "
            "WHERE pg_terminate_backend(pid)", dbname)
        deadline = time.monotonic() + 10
        while await conn.fetchval("SELECT count(*) FROM pg_stat_activity "
                                  "WHERE pid = ANY($1::int[])", pids):
            assert time.monotonic() < deadline, f"backends {pids} did not exit"
            await asyncio.sleep(0.005)
    finally:
        await conn.close()
    return len(pids)


def terminate_now(dbname: str) -> int:
    return asyncio.run(terminate(dbname))


def dbname(url: str) -> str:
    return url.rsplit("/", 1)[1]


class Link:
    """A TCP relay to the PostgreSQL server in a thread of its own. ``cut()`` closes every
    relayed connection and refuses new ones, as a database restart or an outage looks to a
    client. ``blackhole()`` stops forwarding in both directions and holds new connections
    unanswered, resetting nothing: bytes wait in the relay as packets wait for a partition to
    heal (a client sees silence, then its deadlines). ``mend()`` ends either: connections
    are let through again (on the same port) and held bytes flow on."""

    def __init__(self) -> None:
        target = urlsplit(PG_URL)
        self._target = (target.hostname or "127.0.0.1", target.port or 5432)
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._flowing: asyncio.Event | None = None  # made in the relay's loop
        self.mend()

    def url(self, database_url: str) -> str:
        """``database_url`` (on the test server) reached through this link."""
        parts = urlsplit(database_url)
        user = f"{parts.username}@" if parts.username else ""
        return f"postgresql://{user}127.0.0.1:{self.port}{parts.path}"

    def _call(self, coro: Coroutine[Any, Any, None]) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    def mend(self) -> None:
        self._call(self._flow(True))

    def cut(self) -> None:
        self._call(self._cut())

    def blackhole(self) -> None:
        self._call(self._flow(False))

    def close(self) -> None:
        self.cut()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _flow(self, on: bool) -> None:
        if self._flowing is None:
            self._flowing = asyncio.Event()
        if on:
            self._flowing.set()
        else:
            self._flowing.clear()
        await self._listen()

    async def _listen(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(self._relay, "127.0.0.1", self.port)

    async def _cut(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            assert self._flowing is not None
            await self._flowing.wait()  # accepted, but unanswered during a blackhole
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                assert self._flowing is not None
                await self._flowing.wait()  # held during a blackhole
                writer.write(data)
                await writer.drain()
        except (OSError, ConnectionError):
            pass
        finally:
            self._writers.discard(writer)
            writer.transport.abort()
