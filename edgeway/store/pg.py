"""The PostgreSQL driver on bare asyncpg: autocommit reads on a few held connections
(``_PgReaders``), write transactions on a pool (``_PgWriteTx``). Both outlive lost
connections (``retry`` says which failures mean one); a lost connection is never used again.

Reads are retried on a fresh connection: a read changes nothing, so trying it again is safe.

A write transaction keeps a journal: each statement with its result. When its connection is
lost before COMMIT was sent, the transaction certainly did not commit (the server rolls back
what a dead connection had open), so it is replayed on a fresh connection, and carries on
there if every statement returns what it returned the first time: the code that ran between
the statements saw exactly those results, so it would have sent the same statements. If a
result differs (the data changed in between), the transaction gives up with
``DatabaseUnavailable``: nothing was committed and the client may try again. A connection lost
while COMMIT was in flight leaves the outcome unknown: ``OutcomeUnknown``, never a silent
retry (a create would be made twice).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import cache
from typing import Any

import asyncpg
import structlog

from edgeway.store import pgconn, retry
from edgeway.store.db import DatabaseUnavailable, OutcomeUnknown, Row, Tx, UniqueViolation

log = structlog.get_logger()
Connect = Callable[[float], Awaitable[Any]]  # opens a connection within the given seconds


@cache
def pg_sql(sql: str) -> str:
    """``?`` placeholders to asyncpg's ``$n`` (our SQL never holds a literal ``?``)."""
    parts = sql.split("?")
    return "".join(p + (f"${i}" if i < len(parts) else "") for i, p in enumerate(parts, 1))


class _PgTx:
    """The ``Tx`` statements, run by a subclass's ``_run(method, sql, args)``."""
    dialect = "postgresql"

    async def _run(self, method: str, sql: str, args: tuple[Any, ...]) -> Any:
        raise NotImplementedError

    async def doc_by_id(self, table: str, id_: str) -> str | None:
        doc: str | None = await self._run(
            "fetchval", f"SELECT doc FROM {table} WHERE id = $1", (id_,))
        return doc

    async def fetchone(self, sql: str, *args: Any) -> Row | None:
        row: Row | None = await self._run("fetchrow", pg_sql(sql), args)
        return row

    async def fetchall(self, sql: str, *args: Any) -> list[Row]:
        return list(await self._run("fetch", pg_sql(sql), args))

    async def execute(self, sql: str, *args: Any) -> int:
        try:
            status: str = await self._run("execute", pg_sql(sql), args)
        except asyncpg.UniqueViolationError as exc:
            raise UniqueViolation(exc.constraint_name or str(exc)) from None
        tail = status.rsplit(" ", 1)[-1]
        return int(tail) if tail.isdigit() else 0


class _PgReadTx(_PgTx):
    """Reads outside a transaction, on the shared reader connections (batched by id)."""

    def __init__(self, readers: _PgReaders) -> None:
        self._readers = readers

    async def _run(self, method: str, sql: str, args: tuple[Any, ...]) -> Any:
        return await self._readers.run(method, sql, args)

    async def doc_by_id(self, table: str, id_: str) -> str | None:
        return await self._readers.doc_by_id(table, id_)


class _PgWriteTx(_PgTx):
    """One write transaction on a pooled connection, taken at its first statement; replayed
    on a fresh connection when its own is lost before COMMIT (see the module docstring)."""

    def __init__(self, pool: Any, reach: retry.Reach) -> None:
        self._pool, self._reach = pool, reach
        self._conn: Any = None
        self._journal: list[tuple[str, str, tuple[Any, ...], Any]] = []

    async def _run(self, method: str, sql: str, args: tuple[Any, ...]) -> Any:
        result = await self._retrying(
            "write", lambda c, wait: getattr(c, method)(sql, *args, timeout=wait))
        self._journal.append((method, sql, args, result))
        return result

    async def commit(self) -> None:
        try:
            if self._conn is not None or self._journal:
                await self._retrying("commit", lambda c, wait: c.execute("COMMIT", timeout=wait))
        finally:
            await self._release()

    async def rollback(self, why: BaseException) -> None:
        """After the body raised: ROLLBACK on a healthy connection; one that is lost, or whose
        statement was cancelled, is terminated instead (the server then rolls back)."""
        try:
            if self._conn is not None and isinstance(why, Exception) \
                    and not retry.lost(why, self._conn):
                try:
                    await self._conn.execute("ROLLBACK", timeout=retry.STATEMENT_TIMEOUT)
                except Exception:
                    self._lose()
            else:
                self._lose()
        finally:
            await self._release()

    async def _retrying(self, what: str, step: Callable[[Any, float], Awaitable[Any]]) -> Any:
        """``step(connection, timeout)`` on this transaction's connection, within a
        ``Budget``; a lost connection is replaced and the journal replayed."""
        attempt, budget = 0, retry.Budget()
        while True:
            conn = None
            try:
                conn = await self._open(budget)
                return await step(conn, budget.left(retry.STATEMENT_TIMEOUT))
            except Exception as exc:
                if not retry.lost(exc, self._conn):
                    raise
                connecting = self._conn is None  # the pool could not hand one out
                self._lose()
                if what == "commit" and conn is not None and not retry.unsent(exc):
                    log.warning("store_commit_outcome_unknown", error=str(exc))
                    raise OutcomeUnknown("the database connection was lost while the "
                                         "transaction was being committed") from exc
                reach = self._reach if retry.silent(exc, connecting) else None
                await retry.pause(attempt, exc, what, reach, budget)
                attempt += 1

    async def _open(self, budget: retry.Budget) -> Any:
        """This transaction's connection: a pooled one after BEGIN and the journal."""
        if self._conn is not None:
            return self._conn
        self._reach.check()
        self._conn = conn = await self._pool.acquire(
            timeout=budget.left(retry.CONNECT_TIMEOUT + retry.STATEMENT_TIMEOUT))
        await conn.execute("BEGIN", timeout=budget.left(retry.STATEMENT_TIMEOUT))
        self._reach.reached()
        for method, sql, args, result in self._journal:
            try:
                again = await getattr(conn, method)(
                    sql, *args, timeout=budget.left(retry.STATEMENT_TIMEOUT))
            except Exception as exc:
                if retry.lost(exc, conn):
                    raise
                again = exc
            if again != result:
                log.warning("store_replay_diverged", statement=sql)
                raise DatabaseUnavailable("the database connection was lost mid-transaction "
                                          "and the data changed before it could be replayed")
        if self._journal:
            log.info("store_transaction_replayed", statements=len(self._journal))
        return conn

    def _lose(self) -> None:
        conn, self._conn = self._conn, None
        retry.drop(conn)  # its pool holder is freed and reconnects on the next acquire

    async def _release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):  # the pool terminated it: nothing to undo
                await self._pool.release(conn)


class _PgReaders:
    """Autocommit reads on a few long-lived connections, each guarded by a lock.

    Cheaper than a pool checkout per read (measured ~120 µs of client CPU per read through
    ``pool.fetchrow`` against ~50 µs on a held connection). A read takes the first idle
    connection, or queues on the least busy one. A connection that is lost is terminated and
    replaced, and the read tried again (``retry``).
    """

    def __init__(self, connect: Connect, conns: list[Any], reach: retry.Reach) -> None:
        self._connect, self._reach = connect, reach
        self._conns: list[Any] = conns  # None: lost, reopened by the next read on it
        self._locks = [asyncio.Lock() for _ in conns]
        self._load = [0] * len(conns)  # reads running or queued per connection
        self._pending: dict[str, dict[str, list[asyncio.Future[str | None]]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def run(self, method: str, sql: str, args: tuple[Any, ...]) -> Any:
        i = min(range(len(self._load)), key=self._load.__getitem__)
        self._load[i] += 1
        budget = retry.Budget()
        try:
            await budget.wait(self._locks[i].acquire())
            try:
                return await self._attempts(i, method, sql, args, budget)
            finally:
                self._locks[i].release()
        finally:
            self._load[i] -= 1

    async def _attempts(self, i: int, method: str, sql: str, args: tuple[Any, ...],
                        budget: retry.Budget) -> Any:
        attempt = 0
        while True:
            conn = self._conns[i]
            try:
                if conn is None:
                    self._reach.check()
                    conn = self._conns[i] = await self._connect(
                        budget.left(retry.CONNECT_TIMEOUT))
                    self._reach.reached()
                return await getattr(conn, method)(
                    sql, *args, timeout=budget.left(retry.STATEMENT_TIMEOUT))
            except Exception as exc:
                if not retry.lost(exc, conn):
                    raise
                retry.drop(conn)
                self._conns[i] = None
                reach = self._reach if retry.silent(exc, conn is None) else None
                await retry.pause(attempt, exc, "read", reach, budget)
                attempt += 1

    async def doc_by_id(self, table: str, id_: str) -> str | None:
        """Reads by id that arrive in the same event-loop turn share one query: each read
        still starts after its request arrived, so nothing is served stale."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[str | None] = loop.create_future()
        waiting = self._pending.get(table)
        if waiting is None:
            waiting = self._pending[table] = {}
            loop.call_soon(lambda: self._tasks.add(loop.create_task(self._flush(table))))
        waiting.setdefault(id_, []).append(fut)
        return await fut

    async def _flush(self, table: str) -> None:
        waiting = self._pending.pop(table)
        try:
            rows = await self.run("fetch", f"SELECT id, doc FROM {table} WHERE id = ANY($1)",
                                  (list(waiting),))
        except Exception as exc:
            for futs in waiting.values():
                for f in futs:
                    if not f.done():
                        f.set_exception(exc)
        else:
            found = {r[0]: r[1] for r in rows}
            for id_, futs in waiting.items():
                for f in futs:
                    if not f.done():
                        f.set_result(found.get(id_))
        finally:
            task = asyncio.current_task()
            if task is not None:
                self._tasks.discard(task)

    async def close(self) -> None:
        for conn in self._conns:
            if conn is not None:
                try:
                    await conn.close(timeout=retry.CONNECT_TIMEOUT)
                except Exception:
                    conn.terminate()


class PgDatabase:
    dialect = "postgresql"

    def __init__(self, url: str, pool: Any, readers: _PgReaders, reach: retry.Reach) -> None:
        self.url = url
        self._pool, self._readers, self._reach = pool, readers, reach

    @classmethod
    async def open(cls, url: str, max_size: int = 10, readers: int = 4) -> PgDatabase:
        dsn = pgconn.asyncpg_dsn(url)
        # no floor of idle connections: asyncpg would keep restoring it during an outage,
        # logging a traceback each time; connections open on demand and then stay
        pool = await asyncpg.create_pool(dsn, min_size=0, max_size=max_size, reset=pgconn.reset,
                                         init=pgconn.init, timeout=retry.CONNECT_TIMEOUT,
                                         **pgconn.connect_kwargs())
        connect = pgconn.connector(dsn)
        conns = [await connect(retry.CONNECT_TIMEOUT) for _ in range(readers)]
        reach = retry.Reach()
        return cls(url, pool, _PgReaders(connect, conns, reach), reach)

    def reader(self) -> Tx:
        return _PgReadTx(self._readers)

    @asynccontextmanager
    async def write(self) -> AsyncIterator[Tx]:
        tx = _PgWriteTx(self._pool, self._reach)
        try:
            yield tx
        except BaseException as exc:
            await tx.rollback(exc)
            raise
        await tx.commit()

    async def close(self) -> None:
        await self._readers.close()
        await self._pool.close()
