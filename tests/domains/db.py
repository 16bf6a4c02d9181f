"""The test server's own database, for what the API cannot show or make: a job row of the
certificate manager, or a state an earlier version left behind (a reference to a deleted
certificate). Opened from the test process, as a second node would."""

from __future__ import annotations

import asyncio
from typing import Any

from edgeway.store.migrate import open_database
from tests.server import Server


async def _run(server: Server, sql: str, args: tuple[Any, ...], write: bool) -> Any:
    db = await open_database(server.database_url, server.data_dir)
    try:
        if not write:
            return await db.reader().fetchall(sql, *args)
        async with db.write() as tx:
            return await tx.execute(sql, *args)
    finally:
        await db.close()


def rows(server: Server, sql: str, *args: Any) -> list[Any]:
    out: list[Any] = asyncio.run(_run(server, sql, args, False))
    return out


def execute(server: Server, sql: str, *args: Any) -> int:
    """Run one statement in its own transaction; the rows it changed."""
    changed: int = asyncio.run(_run(server, sql, args, True))
    return changed
