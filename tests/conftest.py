"""Shared fixtures: a real server per backend (SQLite file, PostgreSQL database)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from tests.server import Server, fresh_pg_database, start

BACKENDS = [b for b in os.environ.get("EDGEWAY_TEST_BACKENDS", "sqlite,postgres").split(",")
            if b]


@pytest.fixture(scope="session", params=BACKENDS)
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Server]:
    with ExitStack() as stack:
        url = stack.enter_context(fresh_pg_database()) if request.param == "postgres" else None
        srv = start(Path(tmp_path_factory.mktemp(f"srv-{request.param}")), url)
        try:
            yield srv
        finally:
            code = srv.stop()
        assert code == 0, f"server did not shut down cleanly ({code}):\n{srv.log()}"


@pytest.fixture
def api(server: Server) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[Server]:
    """A server of the test's own, on SQLite, for tests that change platform-wide state."""
    srv = start(tmp_path / "srv")
    try:
        yield srv
    finally:
        assert srv.stop() == 0
