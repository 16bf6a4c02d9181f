"""The schema brought to the latest Alembic revision (SQLAlchemy and Alembic: imported only
when a database is behind, see ``migrate``)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.ext.asyncio import create_async_engine

from edgeway.store import pgconn, retry
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
