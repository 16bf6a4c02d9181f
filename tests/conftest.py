"""Shared fixtures: a real server per backend (SQLite file, PostgreSQL database)."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from tests import schedule
from tests.edge import upstream
from tests.server import Server, fresh_pg_database, start

T = TypeVar("T")
BACKENDS = [b for b in os.environ.get("EDGEWAY_TEST_BACKENDS", "sqlite,postgres").split(",")
            if b]


CORS_ORIGIN = "https://console.example.com"  # the shared servers' browser origin


@pytest.fixture(autouse=True)
def _logging_as_it_was() -> Iterator[None]:
    """A test that runs a command in this process (``cli.main``) configures the logs to the
    stderr pytest captures for it, closed after it: the next tests of this worker would log
    to a closed file (structlog) or through a guard they never asked for (the standard
    library's root handler). Both are put back after every test."""
    import logging

    import structlog
    config, root = structlog.get_config(), logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    if structlog.get_config() != config:
        structlog.configure(**config)
    if root.handlers != handlers or root.level != level:
        root.handlers[:] = handlers
        root.setLevel(level)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test a node id of its own: pytest-xdist schedules by node id, so all but one of
    the tests sharing one would never run in a parallel run. The files go longest first
    (``tests/schedule.py``)."""
    duplicated = [n for n, c in Counter(item.nodeid for item in items).items() if c > 1]
    if duplicated:
        raise pytest.UsageError(f"tests share node ids (a parallel run would skip them): "
                                f"{duplicated[:5]}")
    items[:] = [items[i] for i in schedule.order([item.nodeid for item in items])]


@pytest.hookimpl(optionalhook=True)  # (pytest-xdist's hook)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """The parallel run's units of work (``tests/schedule.py``)."""
    return schedule.scheduler(config, log)


@contextmanager
def backend_server(backend: str, data_dir: Path, *extra: str) -> Iterator[Server]:
    """A real server on ``backend`` (sqlite, or a fresh PostgreSQL database), with ``extra``
    options, stopped after; it must shut down cleanly."""
    with ExitStack() as stack:
        url = stack.enter_context(fresh_pg_database()) if backend == "postgres" else None
        srv = start(data_dir, url, "--api-cors-origins", CORS_ORIGIN, *extra)
        try:
            yield srv
        finally:
            code = srv.stop()
        assert code == 0, f"server did not shut down cleanly ({code}):\n{srv.log()}"


class Shared:
    """Servers kept for the whole run of a worker, each made on first use. pytest keeps one
    parameter of a parametrized session fixture at a time; with tests scheduled a file at a
    time (pytest-xdist's loadfile) every file would stop one backend's server and start the
    other's. Fixtures of any scope take their server from here instead."""

    def __init__(self, stack: ExitStack) -> None:
        self._stack = stack
        self._made: dict[object, Any] = {}

    def get(self, key: object, make: Callable[[], AbstractContextManager[T]]) -> T:
        if key not in self._made:
            self._made[key] = self._stack.enter_context(make())
        value: T = self._made[key]
        return value


@pytest.fixture(scope="session")
def shared() -> Iterator[Shared]:
    with ExitStack() as stack:
        yield Shared(stack)


@pytest.fixture(scope="module", params=BACKENDS)
def server(request: pytest.FixtureRequest, shared: Shared,
           tmp_path_factory: pytest.TempPathFactory) -> Server:
    """The worker's server on this backend, shared by every module that asks for it."""
    backend = request.param
    return shared.get(("server", backend), lambda: backend_server(
        backend, Path(tmp_path_factory.mktemp(f"srv-{backend}"))))


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


@pytest.fixture
def echo_port() -> Iterator[int]:
    with upstream.echo() as port:
        yield port
