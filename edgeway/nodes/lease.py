"""Each node's row in ``nodes``: where the others reach it, its region, its public addresses
and its lease, renewed every third of the lease. A node whose lease ran out (killed, cut off
from the database) is gone: the first live node to notice deletes its row and, in the same
transaction, the agent sessions, tunnels and endpoints it recorded, and tells everyone. Its
agents reconnect (to any node) and re-bind the same URLs and ports.

A node that finds its own row gone (its heartbeats could not reach the database for a whole
lease, and another node removed it) joins again and has its agents reconnect (``lost``): the
rows of their tunnels went with its row."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import structlog

from edgeway import catalog
from edgeway.store import nodes
from edgeway.store.db import Database, DatabaseUnavailable
from edgeway.store.nodes import Node
from edgeway.store.repo import Repo

log = structlog.get_logger()
RECORDED = tuple(catalog.BY_COLLECTION[c] for c in ("endpoints", "tunnels", "tunnel_sessions"))
NODES = "nodes"  # what is announced when a node joins, leaves or is gone


class NodeLease:
    def __init__(self, db: Database, me: Node, lease: float,
                 changed: Callable[[str], None], lost: Callable[[], Awaitable[None]]) -> None:
        self.db, self.me, self.lease = db, me, lease
        self.changed, self.lost = changed, lost
        self.live: dict[str, Node] = {}  # the live nodes at the last heartbeat, this one too
        self.tick: Callable[[], None] = lambda: None  # called after each heartbeat
        self._task: asyncio.Task[None] | None = None

    async def join(self) -> None:
        now = time.time()
        async with self.db.write() as tx:
            await tx.execute("DELETE FROM nodes WHERE id = ?", self.me.id)
            await tx.execute(
                "INSERT INTO nodes (id, addr, region, public_ips, started_at, lease_until) "
                "VALUES (?, ?, ?, ?, ?, ?)", self.me.id, self.me.addr, self.me.region,
                ",".join(self.me.public_ips), now, now + self.lease)
        await self.load()
        self.changed(NODES)
        log.info("node_joined", node=self.me.id, addr=self.me.addr, region=self.me.region,
                 nodes=len(self.live))

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._beat())

    async def leave(self) -> None:
        """A clean stop: the others stop sending connections here at once."""
        if self._task is not None:
            self._task.cancel()
        try:
            async with self.db.write() as tx:
                await tx.execute("DELETE FROM nodes WHERE id = ?", self.me.id)
        except DatabaseUnavailable as exc:
            log.warning("node_leave_failed", error=str(exc))
            return
        self.changed(NODES)

    async def load(self) -> dict[str, Node]:
        self.live = {node.id: node for node in await nodes.live(self.db)}
        return self.live

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self.lease / 3)
            try:
                await self.renew()
                await self.sweep()
                before = set(self.live)
                if set(await self.load()) != before:
                    self.changed(NODES)
                self.tick()
            except DatabaseUnavailable as exc:
                log.warning("node_heartbeat_failed", node=self.me.id, error=str(exc))

    async def renew(self) -> None:
        async with self.db.write() as tx:
            renewed = await tx.execute("UPDATE nodes SET lease_until = ? WHERE id = ?",
                                       time.time() + self.lease, self.me.id)
        if not renewed:
            log.warning("node_lease_lost", node=self.me.id)
            await self.join()
            await self.lost()

    async def sweep(self) -> list[str]:
        """Remove the nodes whose lease ran out, with what they recorded; their ids."""
        now = time.time()
        rows = await self.db.reader().fetchall("SELECT id FROM nodes WHERE lease_until < ?", now)
        gone = []
        for (node_id,) in rows:
            async with self.db.write() as tx:
                # (the one sweeper whose delete took the row removes the rest)
                if not await tx.execute("DELETE FROM nodes WHERE id = ? AND lease_until < ?",
                                        node_id, now):
                    continue
                removed = await _remove_recorded(Repo(tx), str(node_id))
            gone.append(str(node_id))
            log.warning("node_gone", node=node_id, removed=removed)
        if gone:
            for kind in RECORDED:
                self.changed(kind.collection)
            self.changed(NODES)
        return gone


async def _remove_recorded(repo: Repo, node_id: str) -> int:
    count = 0
    for kind in RECORDED:
        for id_, doc in await repo.all_docs(kind):
            if doc.get("node") == node_id:
                await repo.delete(kind, id_)
                count += 1
    return count
