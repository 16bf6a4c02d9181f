"""Open the configured database and bring its schema to the latest Alembic revision.

Runs at every start, on both backends. A database already at the latest revision (read with
the driver itself) is opened at once: SQLAlchemy and Alembic, a third of a second of a cold
start, are imported only to upgrade one (``upgrade``). On PostgreSQL an advisory lock
serialises nodes that upgrade together; on SQLite the file lock does.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import asyncpg

from edgeway.store import retry
from edgeway.store.db import Database, SqliteDatabase, StoreUnavailable, redact
from edgeway.store.pg import PgDatabase
from edgeway.store.pgconn import asyncpg_dsn

VERSIONS = Path(__file__).parent / "migrations" / "versions"


def head() -> str:
    """The latest revision: each migration's revision id is its file's name (checked by the
    tests against Alembic's own reading)."""
    return max(p.stem for p in VERSIONS.glob("[0-9]*.py"))


def _sqlite_revision(path: Path) -> str:
    """The revision of the SQLite file ("" when it has none, or no file yet)."""
    if not path.exists():
        return ""
    try:
        with contextlib.closing(sqlite3.connect(path)) as conn:
            row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.Error:
        return ""
    return str(row[0]) if row else ""


async def _postgres_revision(url: str) -> str:
    try:
        conn = await asyncpg.connect(asyncpg_dsn(url), timeout=retry.CONNECT_TIMEOUT)
    except Exception:  # (whatever it is, the upgrade below meets it again and says so)
        return ""
    try:
        return str(await conn.fetchval("SELECT version_num FROM alembic_version") or "")
    except asyncpg.PostgresError:
        return ""
    finally:
        await conn.close()


async def open_database(database_url: str | None, data_dir: Path) -> Database:
    """Migrate and open PostgreSQL (if a URL is given) or the SQLite file in ``data_dir``."""
    where = redact(database_url) if database_url else str(data_dir / "edgeway.db")
    try:
        if database_url:
            asyncpg_dsn(database_url)
            if await _postgres_revision(database_url) != head():
                from edgeway.store.upgrade import migrate_postgres
                await migrate_postgres(database_url)
            return await PgDatabase.open(database_url)
        data_dir.mkdir(parents=True, exist_ok=True)
        path = data_dir / "edgeway.db"
        if _sqlite_revision(path) != head():
            from edgeway.store.upgrade import migrate_sqlite
            migrate_sqlite(path)
        return SqliteDatabase(path)
    except ValueError:
        raise
    except Exception as exc:
        raise StoreUnavailable(f"cannot open the database at {where}: {exc}") from exc
