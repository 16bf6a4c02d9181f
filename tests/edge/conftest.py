"""One Edgeway server and one upstream service per test module (tests use their own names)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.edge import upstream
from tests.server import Server, start

if not os.environ.get("CI"):
    pytest.importorskip("ngrok", reason="pip install --ignore-requires-python ngrok==1.7.0")


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start(Path(tmp_path_factory.mktemp("edge")))
    try:
        yield server
    finally:
        assert server.stop() == 0


@pytest.fixture(scope="module")
def service() -> Iterator[int]:
    with upstream.running("svc") as port:
        yield port


@pytest.fixture
def token(srv: Server) -> str:
    with srv.client() as api:
        value: str = api.post("/credentials", json={}).json()["token"]
    return value
