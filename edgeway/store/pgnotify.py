"""Changes between nodes that share one PostgreSQL database, by ``LISTEN``/``NOTIFY``.

Every committed write a node announces (``Platform.changed``: the API's writes, binds, ACME
results...) is sent as a notification on ``CHANNEL`` (``<node id> <collection>``), and every
other node's arrives on a connection of this node's own that listens there, to be told to
this node's watchers as if the write were made here: the edge's routing snapshot, the IP
restrictions, the API's key cache, the agent sessions' revocation check, the DNS... follow a
change made through another node within milliseconds, not at their next poll (which stays,
as a safety net).

PostgreSQL sends a notification only once its transaction commits, and drops none while the
listening connection lives; one that was lost is opened again (with back-off), and the
watchers are then told that everything may have changed, since notifications sent meanwhile
are gone. Sending is coalesced: announcements made while one is on its way go in the next
round, each collection once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable
from typing import Any

import asyncpg
import structlog

from edgeway.store import pgconn, retry

CHANNEL = "edgeway_changes"
RETRY_MAX = 5.0  # seconds between attempts to open the listening connection, at most

log = structlog.get_logger()


class ChangeLink:
    """This node's end of the change channel: ``publish`` what it wrote, and ``deliver``
    (to the watchers) what the others wrote; ``everything`` when notifications may have
    been missed."""

    def __init__(self, url: str, node: str, deliver: Callable[[str], None],
                 everything: Callable[[], None]) -> None:
        self.node = node
        self._open = pgconn.connector(pgconn.asyncpg_dsn(url))
        self.deliver, self.everything = deliver, everything
        self._pending: dict[str, None] = {}  # (ordered, each collection once)
        self._wake = asyncio.Event()
        self._lost = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()  # (for tests and the start log)

    def publish(self, collection: str) -> None:
        """A write to ``collection`` committed on this node: tell the others."""
        self._pending[collection] = None
        self._wake.set()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def _received(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        node, _, collection = payload.partition(" ")
        if node != self.node and collection:
            self.deliver(collection)

    async def _run(self) -> None:
        delay, first = 0.2, True
        while True:
            try:
                conn = await self._connect()
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError,
                    asyncpg.InternalClientError, TimeoutError) as exc:
                self.connected.clear()
                log.warning("change_link_down", error=str(exc) or type(exc).__name__,
                            retry_in=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX)
                continue
            delay = 0.2
            if not first:  # notifications sent while it was down are gone
                log.info("change_link_restored")
                self.everything()
            first = False
            try:
                await self._serve(conn)
            except Exception as exc:  # (whatever ended the connection: open another)
                log.warning("change_link_lost", error=str(exc) or type(exc).__name__)
            finally:
                self.connected.clear()
                conn.terminate()

    async def _connect(self) -> Any:
        conn = await self._open(retry.CONNECT_TIMEOUT)
        self._lost.clear()
        conn.add_termination_listener(lambda _conn: self._lost.set())
        await conn.add_listener(CHANNEL, self._received)
        self.connected.set()
        return conn

    async def _serve(self, conn: Any) -> None:
        """Send what this node announces until the connection is lost."""
        lost = asyncio.ensure_future(self._lost.wait())
        try:
            while True:
                if not self._pending:
                    self._wake.clear()
                    woken = asyncio.ensure_future(self._wake.wait())
                    await asyncio.wait((woken, lost), return_when=asyncio.FIRST_COMPLETED)
                    woken.cancel()
                if lost.done():
                    raise ConnectionError("the listening connection closed")
                await self._send(conn, list(self._pending))
        finally:
            lost.cancel()

    async def _send(self, conn: Any, collections: Iterable[str]) -> None:
        for collection in collections:
            await conn.execute("SELECT pg_notify($1, $2)", CHANNEL,
                               f"{self.node} {collection}")
            self._pending.pop(collection, None)
