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


@pytest.fixture(autouse=True)
def agent_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Agents started by a test keep their config and tunnel ids in its own directories."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path
