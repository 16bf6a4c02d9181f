"""The store's database interface (``Database``, ``Tx``, the errors every driver raises) and
the embedded SQLite driver; the PostgreSQL driver lives in ``pg``.

Why not SQLAlchemy's async engine for queries: measured on this machine, a primary-key read
costs ~670 µs through SQLAlchemy async on aiosqlite or asyncpg, ~9 µs through the stdlib sqlite3
module and ~280 µs through a bare asyncpg pool (round trip included). SQLAlchemy still defines
the schema and Alembic migrates it (``schema``, ``migrate``); queries run on the bare drivers.

SQLite runs in the event loop: a primary-key read is a few microseconds, cheaper than a thread
hop. Two connections in WAL mode: reads on one (each statement sees the last commit), write
transactions on the other, serialised by an asyncio lock; a write transaction never yields to
another request's statements. SQLite has no connections to lose: ``DatabaseUnavailable``
comes only from PostgreSQL.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Protocol

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


class DatabaseUnavailable(Exception):
    """The database could not be reached: its connections were lost or refused, and the
    retries did not get a working one. Nothing was committed (but see ``OutcomeUnknown``)."""


class OutcomeUnknown(DatabaseUnavailable):
    """The connection was lost while COMMIT was in flight: the transaction may or may not
    have committed, and nobody can tell from here."""


class UniqueViolation(Exception):
    """A unique constraint refused a write; ``detail`` names the constraint or columns."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class Tx(Protocol):
    dialect: str  # "sqlite" or "postgresql"

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
    dialect = "sqlite"

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
    conn.execute("PRAGMA secure_delete=ON")  # (no cleartext left in freed space: sealing.py)
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
