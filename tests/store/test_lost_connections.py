"""The PostgreSQL driver against lost connections, on a real server: reads are retried on a
fresh connection; a write transaction is replayed when its connection is lost before COMMIT
went out, gives up when the data changed in between, and reports an unknown outcome when
COMMIT was in flight; a database out of reach is ``DatabaseUnavailable`` after bounded
retries, and works again once it is back. Other errors are never retried or masked."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import asyncpg
import pytest
import structlog

from edgeway.store import retry
from edgeway.store.db import DatabaseUnavailable, OutcomeUnknown, UniqueViolation
from edgeway.store.pg import PgDatabase
from tests.conftest import BACKENDS
from tests.pgfaults import Link, dbname, terminate
from tests.server import fresh_pg_database
from tests.waiting import until

needs_pg = pytest.mark.skipif("postgres" not in BACKENDS, reason="PostgreSQL backend not selected")


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with fresh_pg_database() as db_url:
        yield db_url


@asynccontextmanager
async def opened(url: str) -> AsyncIterator[PgDatabase]:
    db = await PgDatabase.open(url, max_size=3, readers=2)
    try:
        yield db
    finally:
        await db.close()


async def fresh_table(db: PgDatabase, name: str) -> None:
    async with db.write() as tx:
        await tx.execute(f"DROP TABLE IF EXISTS {name}")
        await tx.execute(f"CREATE TABLE {name} (id text PRIMARY KEY, doc text NOT NULL)")
        await tx.execute(f"INSERT INTO {name} VALUES ('a', 'A')")


async def rows(url: str, table: str) -> dict[str, str]:
    conn = await asyncpg.connect(url)
    try:
        return {r[0]: r[1] for r in await conn.fetch(f"SELECT id, doc FROM {table}")}
    finally:
        await conn.close()


@needs_pg
def test_reads_after_every_backend_was_terminated(url: str) -> None:
    async def run() -> None:
        async with opened(url) as db:
            await fresh_table(db, "r1")
            reader = db.reader()
            assert await reader.doc_by_id("r1", "a") == "A"
            assert await terminate(dbname(url)) >= 3  # the readers and the pooled writer
            with structlog.testing.capture_logs() as logs:
                docs, ids = await asyncio.gather(
                    asyncio.gather(*(reader.doc_by_id("r1", "a") for _ in range(20))),
                    reader.fetchall("SELECT id FROM r1"))
            assert docs == ["A"] * 20 and [r[0] for r in ids] == ["a"]
            assert any(e["event"] == "store_connection_lost" and e["what"] == "read"
                       for e in logs)
            async with db.write() as tx:  # the pool's dead connection is not handed out
                await tx.execute("INSERT INTO r1 VALUES ('b', 'B')")
        assert await rows(url, "r1") == {"a": "A", "b": "B"}
    asyncio.run(run())


@needs_pg
def test_write_lost_between_statements_is_replayed_once(url: str) -> None:
    async def run() -> None:
        async with opened(url) as db:
            await fresh_table(db, "w1")
            with structlog.testing.capture_logs() as logs:
                async with db.write() as tx:
                    count = await tx.fetchone("SELECT count(*) FROM w1")
                    assert count is not None and count[0] == 1
                    await tx.execute("INSERT INTO w1 VALUES ('b', 'B')")
                    await terminate(dbname(url))
                    await tx.execute("INSERT INTO w1 VALUES ('c', 'C')")
            assert [e["statements"] for e in logs
                    if e["event"] == "store_transaction_replayed"] == [2]
        assert await rows(url, "w1") == {"a": "A", "b": "B", "c": "C"}
    asyncio.run(run())


@needs_pg
def test_replay_that_reads_other_data_gives_up_and_commits_nothing(url: str) -> None:
    async def run() -> None:
        async with opened(url) as db:
            await fresh_table(db, "w2")
            with pytest.raises(DatabaseUnavailable) as caught:
                async with db.write() as tx:
                    await tx.fetchone("SELECT count(*) FROM w2")
                    await tx.execute("INSERT INTO w2 VALUES ('b', 'B')")
                    await terminate(dbname(url))
                    other = await asyncpg.connect(url)
                    await other.execute("INSERT INTO w2 VALUES ('x', 'X')")  # count changes
                    await other.close()
                    await tx.execute("INSERT INTO w2 VALUES ('c', 'C')")
            assert not isinstance(caught.value, OutcomeUnknown)
        assert await rows(url, "w2") == {"a": "A", "x": "X"}
    asyncio.run(run())


@needs_pg
def test_commit_not_yet_sent_is_replayed(url: str) -> None:
    async def run() -> None:
        async with opened(url) as db:
            await fresh_table(db, "w3")
            with structlog.testing.capture_logs() as logs:
                async with db.write() as tx:
                    await tx.execute("INSERT INTO w3 VALUES ('b', 'B')")
                    await terminate(dbname(url))
                    conn = tx._conn  # type: ignore[attr-defined]

                    async def noticed() -> bool:  # the client saw its connection go
                        try:
                            return bool(conn.is_closed())
                        except asyncpg.InterfaceError:
                            return True  # and its pool took it back
                    await until(noticed)
            assert [e["what"] for e in logs if e["event"] == "store_connection_lost"] == \
                ["commit"]
        assert await rows(url, "w3") == {"a": "A", "b": "B"}
    asyncio.run(run())


@needs_pg
def test_commit_in_flight_is_an_unknown_outcome(url: str) -> None:
    async def run() -> None:
        async with opened(url) as db:
            await fresh_table(db, "w4")
            async with db.write() as tx:  # a trigger that makes COMMIT take its time
                await tx.execute("CREATE OR REPLACE FUNCTION slow() RETURNS trigger "
                                 "LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(30); "
                                 "RETURN NULL; END $$")
                await tx.execute("CREATE CONSTRAINT TRIGGER slow AFTER INSERT ON w4 "
                                 "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW "
                                 "EXECUTE FUNCTION slow()")

            async def insert() -> None:
                async with db.write() as tx:
                    await tx.execute("INSERT INTO w4 VALUES ('b', 'B')")

            task = asyncio.create_task(insert())
            admin = await asyncpg.connect(url)
            try:
                await until(lambda: admin.fetchval(
                    "SELECT count(*) > 0 FROM pg_stat_activity WHERE datname = $1 AND "
                    "query = 'COMMIT' AND state = 'active'", dbname(url)))
            finally:
                await admin.close()
            await terminate(dbname(url))
            with pytest.raises(OutcomeUnknown):
                await asyncio.wait_for(task, 10)
            async with db.write() as tx:  # and the pool serves the next transaction
                await tx.execute("DROP TRIGGER slow ON w4")
    asyncio.run(run())


@needs_pg
def test_outage_is_unavailable_within_bounds_then_recovers(url: str) -> None:
    link = Link()

    async def run() -> None:
        async with opened(link.url(url)) as db:
            await fresh_table(db, "o1")
            link.cut()
            start = time.monotonic()
            with pytest.raises(DatabaseUnavailable) as read:
                await db.reader().doc_by_id("o1", "a")
            gave_up = time.monotonic()
            assert sum(retry.BACKOFF) <= gave_up - start < retry.ATTEMPTS * retry.CONNECT_TIMEOUT
            # connecting failed every time: for a moment, work fails at once
            with pytest.raises(DatabaseUnavailable) as write:
                async with db.write() as tx:
                    await tx.execute("INSERT INTO o1 VALUES ('b', 'B')")
            assert time.monotonic() - gave_up < retry.BACKOFF[0]
            assert not isinstance(read.value, OutcomeUnknown)
            assert not isinstance(write.value, OutcomeUnknown)
            link.mend()

            async def back() -> bool:
                try:
                    return await db.reader().doc_by_id("o1", "a") == "A"
                except DatabaseUnavailable:
                    return False
            await until(back, within=retry.HOLD + 5)
            async with db.write() as tx:
                await tx.execute("INSERT INTO o1 VALUES ('c', 'C')")
        assert await rows(url, "o1") == {"a": "A", "c": "C"}
    try:
        asyncio.run(run())
    finally:
        link.close()


@needs_pg
def test_other_errors_are_neither_retried_nor_masked(url: str) -> None:
    async def run() -> None:
        async with opened(url) as db:
            await fresh_table(db, "e1")
            with pytest.raises(asyncpg.PostgresSyntaxError):
                await db.reader().fetchall("SELEC 1")
            with pytest.raises(UniqueViolation):
                async with db.write() as tx:
                    await tx.execute("INSERT INTO e1 VALUES ('b', 'B')")
                    await tx.execute("INSERT INTO e1 VALUES ('a', 'again')")
            with pytest.raises(ZeroDivisionError):
                async with db.write() as tx:
                    await tx.execute("INSERT INTO e1 VALUES ('c', 'C')")
                    raise ZeroDivisionError
        assert await rows(url, "e1") == {"a": "A"}
    asyncio.run(run())


def test_which_failures_mean_a_lost_connection() -> None:
    lost = [OSError("reset"), ConnectionRefusedError(), TimeoutError(),
            asyncpg.InternalClientError("cannot switch to state 12; another operation (2) is "
                                        "in progress"),
            asyncpg.AdminShutdownError("terminating connection due to administrator command"),
            asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of "
                                                "operation"),
            asyncpg.CannotConnectNowError("the database system is starting up"),
            asyncpg.TooManyConnectionsError("too many clients"),
            asyncpg.InterfaceError("connection is closed")]
    kept = [asyncpg.QueryCanceledError("canceling statement"), asyncpg.UniqueViolationError(""),
            asyncpg.InterfaceError("cannot perform operation: another operation is in "
                                   "progress"),
            asyncpg.exceptions.DataError("invalid input"), ValueError("x")]
    assert [e for e in lost if not retry.lost(e)] == []
    assert [e for e in kept if retry.lost(e)] == []
    # COMMIT can be tried again only when the failure came before it was sent
    assert retry.unsent(asyncpg.InternalClientError("cannot switch to state 15; another "
                                                    "operation (2) is in progress"))
    assert retry.unsent(asyncpg.InterfaceError("connection is closed"))
    assert retry.unsent(asyncpg.InterfaceError("cannot call Connection.execute(): connection "
                                               "has been released back to the pool"))
    assert not retry.unsent(asyncpg.ConnectionDoesNotExistError("connection was closed in the "
                                                                "middle of operation"))
    assert not retry.unsent(asyncpg.AdminShutdownError("terminating connection"))
    assert not retry.unsent(ConnectionResetError())
