"""The Alembic migrations produce exactly the schema the catalog declares, on both backends,
and a second start on a migrated database changes nothing."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.ext.asyncio import create_async_engine

from edgeway.store import migrate
from edgeway.store.schema import metadata, tables
from edgeway.store.upgrade import alembic_config, migrate_postgres, migrate_sqlite, sqlalchemy_url
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


def test_the_latest_revision_is_read_without_alembic() -> None:
    """``migrate.head`` (each revision id is its file's name) is Alembic's head: a start on a
    database at it skips Alembic and SQLAlchemy entirely."""
    assert migrate.head() == HEAD


def test_a_start_on_a_current_database_imports_no_sqlalchemy(tmp_path: Path) -> None:
    script = ("import asyncio, sys, pathlib\n"
              "from edgeway.store.migrate import open_database\n"
              "async def main():\n"
              "    db = await open_database(None, pathlib.Path(sys.argv[1]))\n"
              "    await db.close()\n"
              "asyncio.run(main())\n"
              "print(sorted(m for m in sys.modules if m.split('.')[0] in "
              "('sqlalchemy', 'alembic')))\n")
    first = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True,
                           text=True, check=True)
    assert "'alembic'" in first.stdout  # (a new database: migrated)
    again = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True,
                           text=True, check=True)
    assert again.stdout.strip() == "[]", again.stdout
    older = tmp_path / "older"  # a database one revision behind is upgraded
    older.mkdir()
    engine = sa.create_engine(f"sqlite:///{older / 'edgeway.db'}")
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), "0010_dashboard")
    engine.dispose()
    subprocess.run([sys.executable, "-c", script, str(older)], check=True, capture_output=True)
    with contextlib.closing(sqlite3.connect(older / "edgeway.db")) as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchone()[0] == HEAD
