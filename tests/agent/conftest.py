"""A server of each test's own (agent tests restart it), with --reuse-port."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server import Server, start


@pytest.fixture
def srv(tmp_path: Path) -> Iterator[Server]:
    server = start(tmp_path / "srv", None, "--reuse-port")
    yield server
    if server.proc.poll() is None:
        assert server.stop() == 0
