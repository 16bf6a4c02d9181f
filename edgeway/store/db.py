"""Database drivers: the embedded SQLite file and PostgreSQL, behind one small interface.

Why not SQLAlchemy's async engine for queries: measured on this machine, a primary-key read
costs ~670 µs through SQLAlchemy async on aiosqlite or asyncpg, ~9 µs through the stdlib sqlite3
module and ~280 µs through a bare asyncpg pool (round trip included). SQLAlchemy still defines
the schema and Alembic migrates it (``schema``, ``migrate``); queries run on the bare drivers.

SQLite runs in the event loop: a primary-key read is a few microseconds, cheaper than a thread
hop. Two connections in WAL mode: reads on one (each statement sees the last commit), write
transactions on the other, serialised by an asyncio lock; a write transaction never yields to
another request's statements.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from functools import cache
from pathlib import Path
from typing import Any, Protocol

import asyncpg

Row = Sequence[Any]


class StoreUnavailable(Exception):
    """The database could not be opened or migrated; the message says which and why."""


def redact(url: str) -> str:
    """``url`` without its password, for messages and logs."""
    scheme, sep, rest = url.partition("://")
    creds, at, host = rest.rpartition("@")
    if not sep or not at or ":" not in creds:
        return url
    return f"{scheme}://{creds.split(':', 1)[0]}:***@{host}"


class UniqueViolation(Exception):
    """A unique constraint refused a write; ``detail`` names the constraint or columns."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class Tx(Protocol):
    async def doc_by_id(self, table: str, id_: str) -> str | None: ...
    async def fetchone(self, sql: str, *args: Any) -> Row | None: ...
    async def fetchall(self, sql: str, *args: Any) -> list[Row]: ...
    async def execute(self, sql: str, *args: Any) -> int: ...


class Database(Protocol):
    dialect: str
    url: str

    def reader(self) -> Tx: ...
    def write(self) -> Any: ...
    async def close(self) -> None: ...


class _SqliteTx:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._c = conn

    async def doc_by_id(self, table: str, id_: str) -> str | None:
        row = self._c.execute(f"SELECT doc FROM {table} WHERE id = ?", (id_,)).fetchone()
        return str(row[0]) if row else None

    async def fetchone(self, sql: str, *args: Any) -> Row | None:
        row: Row | None = self._c.execute(sql, args).fetchone()
        return row

    async def fetchall(self, sql: str, *args: Any) -> list[Row]:
        return self._c.execute(sql, args).fetchall()

    async def execute(self, sql: str, *args: Any) -> int:
        try:
            return self._c.execute(sql, args).rowcount
        except sqlite3.IntegrityError as exc:
            if "UNIQUE" in str(exc):
                raise UniqueViolation(str(exc)) from None
            raise


def sqlite_connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA busy_timeout=10000")
    conn.execute("PRAGMA foreign_keys=ON")
    # Reads by id land anywhere in a big table: keep pages in memory (a 64 MiB cache) and read
    # the file through mmap instead of a pread per page miss.
    conn.execute("PRAGMA cache_size=-65536")
    conn.execute("PRAGMA mmap_size=1073741824")
    return conn


class SqliteDatabase:
    dialect = "sqlite"

    def __init__(self, path: Path) -> None:
        self.url = f"sqlite:///{path}"
        self._w = sqlite_connect(path)
        self._r = sqlite_connect(path)
        self._lock = asyncio.Lock()

    def reader(self) -> Tx:
        return _SqliteTx(self._r)

    @asynccontextmanager
    async def write(self) -> AsyncIterator[Tx]:
        async with self._lock:
            self._w.execute("BEGIN IMMEDIATE")
            try:
                yield _SqliteTx(self._w)
            except BaseException:
                self._w.execute("ROLLBACK")
                raise
            self._w.execute("COMMIT")

    async def close(self) -> None:
        self._w.close()
        self._r.close()


@cache
def pg_sql(sql: str) -> str:
    """``?`` placeholders to asyncpg's ``$n`` (our SQL never holds a literal ``?``)."""
    parts = sql.split("?")
    return "".join(p + (f"${i}" if i < len(parts) else "") for i, p in enumerate(parts, 1))


class _PgTx:
    def __init__(self, conn: Any) -> None:
        self._c = conn

    async def doc_by_id(self, table: str, id_: str) -> str | None:
        doc: str | None = await self._c.fetchval(f"SELECT doc FROM {table} WHERE id = $1", id_)
        return doc

    async def fetchone(self, sql: str, *args: Any) -> Row | None:
        row: Row | None = await self._c.fetchrow(pg_sql(sql), *args)
        return row

    async def fetchall(self, sql: str, *args: Any) -> list[Row]:
        return list(await self._c.fetch(pg_sql(sql), *args))

    async def execute(self, sql: str, *args: Any) -> int:
        try:
            status: str = await self._c.execute(pg_sql(sql), *args)
        except asyncpg.UniqueViolationError as exc:
            raise UniqueViolation(exc.constraint_name or str(exc)) from None
        tail = status.rsplit(" ", 1)[-1]
        return int(tail) if tail.isdigit() else 0


class _PgReadTx(_PgTx):
    """Reads outside a transaction, on the shared reader connections (batched by id)."""

    _c: _PgReaders

    async def doc_by_id(self, table: str, id_: str) -> str | None:
        return await self._c.doc_by_id(table, id_)


async def _reset(conn: Any) -> None:
    """Replaces asyncpg's default reset on release (RESET ALL, CLOSE ALL, UNLISTEN *, unlock
    all advisory locks: a round trip per query). Our queries leave no session state; only an
    interrupted transaction needs undoing."""
    if conn.is_in_transaction():
        await conn.execute("ROLLBACK")


class _PgReaders:
    """Autocommit reads on a few long-lived connections, each guarded by a lock.

    Cheaper than a pool checkout per read (measured ~120 µs of client CPU per read through
    ``pool.fetchrow`` against ~50 µs on a held connection). A read takes the first idle
    connection, or queues on the least busy one; a connection that broke is replaced once.
    """

    def __init__(self, dsn: str, conns: list[Any]) -> None:
        self._dsn = dsn
        self._conns = conns
        self._locks = [asyncio.Lock() for _ in conns]
        self._load = [0] * len(conns)  # reads running or queued per connection
        self._pending: dict[str, dict[str, list[asyncio.Future[str | None]]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def _run(self, method: str, sql: str, args: tuple[Any, ...]) -> Any:
        i = min(range(len(self._load)), key=self._load.__getitem__)
        self._load[i] += 1
        try:
            async with self._locks[i]:
                try:
                    return await getattr(self._conns[i], method)(sql, *args)
                except (asyncpg.ConnectionDoesNotExistError, asyncpg.InterfaceError):
                    if not self._conns[i].is_closed():
                        raise
                    self._conns[i] = await asyncpg.connect(self._dsn)
                    return await getattr(self._conns[i], method)(sql, *args)
        finally:
            self._load[i] -= 1

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
            rows = await self._run("fetch", f"SELECT id, doc FROM {table} WHERE id = ANY($1)",
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

    async def fetchrow(self, sql: str, *args: Any) -> Any:
        return await self._run("fetchrow", sql, args)

    async def fetch(self, sql: str, *args: Any) -> Any:
        return await self._run("fetch", sql, args)

    async def execute(self, sql: str, *args: Any) -> Any:
        return await self._run("execute", sql, args)

    async def close(self) -> None:
        for conn in self._conns:
            await conn.close()


class PgDatabase:
    dialect = "postgresql"

    def __init__(self, url: str, pool: Any, readers: _PgReaders) -> None:
        self.url = url
        self._pool = pool
        self._readers = readers

    @classmethod
    async def open(cls, url: str, max_size: int = 10, readers: int = 4) -> PgDatabase:
        dsn = asyncpg_dsn(url)
        pool = await asyncpg.create_pool(dsn, min_size=1, max_size=max_size, reset=_reset)
        conns = [await asyncpg.connect(dsn) for _ in range(readers)]
        return cls(url, pool, _PgReaders(dsn, conns))

    def reader(self) -> Tx:
        return _PgReadTx(self._readers)

    @asynccontextmanager
    async def write(self) -> AsyncIterator[Tx]:
        async with self._pool.acquire() as conn, conn.transaction():
            yield _PgTx(conn)

    async def close(self) -> None:
        await self._readers.close()
        await self._pool.close()


def asyncpg_dsn(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.split("+")[0] not in ("postgresql", "postgres"):
        raise ValueError(f"not a PostgreSQL URL: {url!r} (expected postgresql://...)")
    return f"postgresql://{rest}"
