"""The outbox statements on both backends: a destination's lease is one node's until it runs
out, a delivered batch removes exactly its rows (a row that committed late with a lower seq
stays), failures keep the back-off until the destination changes, dead letters go back in
line oldest first."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, nullcontext
from pathlib import Path
from typing import Any, cast

import pytest

from edgeway.store import outbox
from edgeway.store.db import Database, Tx
from edgeway.store.migrate import open_database
from tests.conftest import BACKENDS
from tests.server import fresh_pg_database


@asynccontextmanager
async def database(url: str | None, tmp: Path) -> AsyncIterator[Database]:
    db = await open_database(url, tmp)
    try:
        yield db
    finally:
        await db.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_leases_batches_back_off_and_dead_letters(backend: str, tmp_path: Path) -> None:
    async def run(url: str | None) -> None:
        async with database(url, tmp_path) as db:
            async with db.write() as tx:
                for i in range(3):
                    await outbox.add(tx, ["ed_a"], f"ev_{i}", "x.v0", f'{{"n":{i}}}', 0.0)
            async with db.write() as tx:
                assert await outbox.claim(tx, db.dialect, "ed_a", "node1", 100.0, 30) == (0, 0)
            async with db.write() as tx:  # another node, while the lease runs
                assert await outbox.claim(tx, db.dialect, "ed_a", "node2", 110.0, 30) is None
            async with db.write() as tx:  # the holder renews
                assert await outbox.claim(tx, db.dialect, "ed_a", "node1", 120.0, 30) == (0, 0)
            head = await outbox.head(db.reader(), "ed_a", 10)
            assert [p.event_id for p in head] == ["ev_0", "ev_1", "ev_2"]
            async with db.write() as tx:  # delivered: exactly those two rows
                await outbox.delivered(tx, "ed_a", [head[0], head[2]], "t1")
            assert [p.event_id for p in await outbox.head(db.reader(), "ed_a", 10)] == ["ev_1"]
            async with db.write() as tx:
                await outbox.failed(tx, "ed_a", 2, 999.0, "refused", "t2")
            async with db.write() as tx:  # the lease ran out: node2 takes over, backing off
                assert await outbox.claim(tx, db.dialect, "ed_a", "node2", 200.0, 30) == \
                    (2, 999.0)
            state = (await outbox.states(db.reader(), ["ed_a"]))["ed_a"]
            assert (state.backlog, state.delivered, state.attempts, state.last_error) == \
                (1, 2, 2, "refused")
            async with db.write() as tx:  # the destination changed: no more waiting
                await outbox.retry_now(tx, "ed_a")
                assert await outbox.claim(tx, db.dialect, "ed_a", "node2", 201.0, 30) == (0, 0)
            async with db.write() as tx:
                await outbox.bury(tx, "ed_a", await outbox.head(tx, "ed_a", 10), "gone", 3,
                                  "t3")
                await outbox.add(tx, ["ed_a"], "ev_9", "x.v0", "{}", 0.0)
            dead = await outbox.dead_page(db.reader(), "ed_a", None, 10)
            assert [(r[1], r[4], r[5]) for r in dead] == [("ev_1", "gone", 3)]
            async with db.write() as tx:
                assert await outbox.resend(tx, "ed_a", [], 0.0) == 1
            assert [p.event_id for p in await outbox.head(db.reader(), "ed_a", 10)] == \
                ["ev_9", "ev_1"]
            async with db.write() as tx:
                await outbox.forget(tx, "ed_a")
            assert await outbox.states(db.reader(), ["ed_a"]) == {"ed_a": outbox.State()}
    with fresh_pg_database() if backend == "postgres" else nullcontext() as url:
        asyncio.run(run(url))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_state_counts_an_event_moved_to_the_dead_letters_once(backend: str,
                                                                 tmp_path: Path) -> None:
    """The backlog and the dead letters of a destination's state are counted in one snapshot:
    events buried (by a delivery worker, in one transaction) between two statements of the
    state's read were counted in both (PostgreSQL reads each statement's own snapshot)."""
    async def run(url: str | None) -> None:
        async with database(url, tmp_path) as db:
            async with db.write() as tx:
                for i in range(3):
                    await outbox.add(tx, ["ed_a"], f"ev_{i}", "x.v0", "{}", 0.0)
            pending = await outbox.head(db.reader(), "ed_a", 10)
            reader = db.reader()
            buried: list[bool] = []

            class Between:
                """The reader, with the burial committed right after its first count."""

                def __getattr__(self, name: str) -> Any:
                    return getattr(reader, name)

                async def fetchall(self, sql: str, *args: Any) -> list[Any]:
                    rows = await reader.fetchall(sql, *args)
                    if "event_outbox" in sql and not buried:
                        buried.append(True)
                        async with db.write() as tx:
                            await outbox.bury(tx, "ed_a", pending, "403", 5, "t")
                    return rows

            state = (await outbox.states(cast(Tx, Between()), ["ed_a"]))["ed_a"]
            assert buried
            assert (state.backlog, state.dead_letters) in ((3, 0), (0, 3)), state
            after = (await outbox.states(db.reader(), ["ed_a"]))["ed_a"]
            assert (after.backlog, after.dead_letters) == (0, 3)

    with fresh_pg_database() if backend == "postgres" else nullcontext() as url:
        asyncio.run(run(url))
