"""One Edgeway server per backend and one upstream service per test module (tests use their
own names)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import BACKENDS, backend_server
from tests.edge import upstream
from tests.server import Server

if not os.environ.get("CI"):
    pytest.importorskip("ngrok", reason="pip install --ignore-requires-python ngrok==1.7.0")


@pytest.fixture(scope="module", params=BACKENDS)
def srv(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[Server]:
    """The data plane reads its configuration (edges, routes, backends, policies) and writes
    sessions, tunnels and endpoints through the same store: run it on both."""
    with backend_server(request.param,
                        Path(tmp_path_factory.mktemp(f"edge-{request.param}"))) as server:
        yield server


@pytest.fixture(scope="module")
def service() -> Iterator[int]:
    with upstream.running("svc") as port:
        yield port


@pytest.fixture
def token(srv: Server) -> str:
    with srv.client() as api:
        value: str = api.post("/credentials", json={}).json()["token"]
    return value
