"""The Alembic migrations produce exactly the schema the catalog declares, on both backends,
and a second start on a migrated database changes nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.ext.asyncio import create_async_engine

from edgeway.store.migrate import alembic_config, migrate_postgres, migrate_sqlite, sqlalchemy_url
from edgeway.store.schema import metadata, tables
from tests.conftest import BACKENDS
from tests.server import fresh_pg_database

HEAD = ScriptDirectory.from_config(alembic_config()).get_current_head()


def _diff(conn: sa.Connection) -> list[object]:
    return list(compare_metadata(MigrationContext.configure(conn), metadata))


def _head(conn: sa.Connection) -> str | None:
    return MigrationContext.configure(conn).get_current_revision()


def test_sqlite_schema_matches_catalog(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    migrate_sqlite(path)
    migrate_sqlite(path)
    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.connect() as conn:
        assert _diff(conn) == []
        assert _head(conn) == HEAD
        assert {t.name for t in tables.values()} <= set(sa.inspect(conn).get_table_names())
    engine.dispose()


@pytest.mark.skipif("postgres" not in BACKENDS, reason="PostgreSQL backend not selected")
def test_postgres_schema_matches_catalog() -> None:
    async def check(url: str) -> tuple[list[object], str | None]:
        await asyncio.gather(migrate_postgres(url), migrate_postgres(url))
        engine = create_async_engine(sqlalchemy_url(url))
        async with engine.connect() as conn:
            diff = await conn.run_sync(_diff)
            head = await conn.run_sync(_head)
        await engine.dispose()
        return diff, head

    with fresh_pg_database() as url:
        diff, head = asyncio.run(check(url))
    assert diff == [] and head == HEAD
