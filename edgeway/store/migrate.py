"""Open the configured database and bring its schema to the latest Alembic revision.

Runs at every start, on both backends. On PostgreSQL an advisory lock serialises nodes that
start together; on SQLite the file lock does.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.ext.asyncio import create_async_engine

from edgeway.store import pgconn, retry
from edgeway.store.db import Database, SqliteDatabase, StoreUnavailable, redact
from edgeway.store.pg import PgDatabase
from edgeway.store.pgconn import asyncpg_dsn

MIGRATIONS = Path(__file__).parent / "migrations"
_LOCK_KEY = 0x65646765776179  # "edgeway"


def alembic_config(connection: Any = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = connection
    return cfg


def _upgrade(connection: sa.Connection) -> None:
    logging.getLogger("alembic").setLevel(logging.WARNING)
    if connection.dialect.name == "postgresql":
        connection.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _LOCK_KEY})
    command.upgrade(alembic_config(connection), "head")


def sqlalchemy_url(url: str) -> str:
    return "postgresql+asyncpg://" + asyncpg_dsn(url).split("://", 1)[1]


async def migrate_postgres(url: str) -> None:
    # connecting is bounded and the server drops a vanished client's session (and its
    # lock); statements are not: a migration may be long, or wait for another node's
    settings = {k: v for k, v in pgconn.SERVER_SETTINGS.items() if k.startswith("tcp_")}
    engine = create_async_engine(sqlalchemy_url(url), connect_args={
        "timeout": retry.CONNECT_TIMEOUT, "server_settings": settings})
    try:
        async with engine.begin() as conn:
            await conn.run_sync(_upgrade)
    finally:
        await engine.dispose()


def migrate_sqlite(path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{path}")
    try:
        with engine.begin() as conn:
            _upgrade(conn)
    finally:
        engine.dispose()


async def open_database(database_url: str | None, data_dir: Path) -> Database:
    """Migrate and open PostgreSQL (if a URL is given) or the SQLite file in ``data_dir``."""
    where = redact(database_url) if database_url else str(data_dir / "edgeway.db")
    try:
        if database_url:
            asyncpg_dsn(database_url)
            await migrate_postgres(database_url)
            return await PgDatabase.open(database_url)
        data_dir.mkdir(parents=True, exist_ok=True)
        path = data_dir / "edgeway.db"
        migrate_sqlite(path)
        return SqliteDatabase(path)
    except ValueError:
        raise
    except Exception as exc:
        raise StoreUnavailable(f"cannot open the database at {where}: {exc}") from exc
