"""The ``nodes`` table read: the live nodes of a cluster (``edgeway.nodes.lease`` writes it),
with where each is reached, its region and its public addresses. The built-in DNS answers
region names with them."""

from __future__ import annotations

import time
from dataclasses import dataclass

from edgeway.store.db import Database


@dataclass(frozen=True)
class Node:
    id: str
    addr: str  # host:port of its node link
    region: str
    public_ips: tuple[str, ...]


async def live(db: Database) -> list[Node]:
    """The nodes whose lease has not run out."""
    rows = await db.reader().fetchall(
        "SELECT id, addr, region, public_ips FROM nodes WHERE lease_until >= ? ORDER BY id",
        time.time())
    return [Node(str(r[0]), str(r[1]), str(r[2]), tuple(ip for ip in str(r[3]).split(",") if ip))
            for r in rows]
