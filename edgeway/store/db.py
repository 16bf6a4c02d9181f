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


class PgDatabase:
    dialect = "postgresql"

    def __init__(self, url: str, pool: Any) -> None:
        self.url = url
        self._pool = pool

    @classmethod
    async def open(cls, url: str, max_size: int = 10) -> PgDatabase:
        pool = await asyncpg.create_pool(asyncpg_dsn(url), min_size=1, max_size=max_size)
        return cls(url, pool)

    def reader(self) -> Tx:
        return _PgTx(self._pool)

    @asynccontextmanager
    async def write(self) -> AsyncIterator[Tx]:
        async with self._pool.acquire() as conn, conn.transaction():
            yield _PgTx(conn)

    async def close(self) -> None:
        await self._pool.close()


def asyncpg_dsn(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.split("+")[0] not in ("postgresql", "postgres"):
        raise ValueError(f"not a PostgreSQL URL: {url!r} (expected postgresql://...)")
    return f"postgresql://{rest}"
