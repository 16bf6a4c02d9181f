"""One Edgeway server per backend and one upstream service per test module (tests use their
own names)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import BACKENDS, Shared, backend_server
from tests.edge import upstream
from tests.edge.agents import Agent, agent
from tests.server import Server, free_port, trust

if not os.environ.get("CI"):
    pytest.importorskip("ngrok", reason="pip install --ignore-requires-python ngrok==1.7.0")


@pytest.fixture(scope="module", params=BACKENDS)
def srv(request: pytest.FixtureRequest, shared: Shared,
        tmp_path_factory: pytest.TempPathFactory) -> Server:
    """The data plane reads its configuration (edges, routes, backends, policies) and writes
    sessions, tunnels and endpoints through the same store: run it on both. One server per
    backend for the edge's modules of a worker (tests use their own names)."""
    backend = request.param
    return shared.get(("edge", backend), lambda: backend_server(
        backend, Path(tmp_path_factory.mktemp(f"edge-{backend}"))))


@pytest.fixture(scope="module")
def service() -> Iterator[int]:
    with upstream.running("svc") as port:
        yield port


@pytest.fixture(scope="module")
def one_srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One SQLite server, for tests of the data path alone (it does not depend on the store)."""
    with backend_server("sqlite", Path(tmp_path_factory.mktemp("data-path"))) as server:
        yield server


@pytest.fixture(scope="module")
def sdk(one_srv: Server, service: int) -> Iterator[tuple[Agent, str]]:
    """An SDK agent with a plain-HTTP endpoint to the test service: (agent, its Host)."""
    with one_srv.client() as api:
        token = api.post("/credentials", json={}).json()["token"]
    a = agent(one_srv, token, {"kind": "http", "forward": f"http://127.0.0.1:{service}"})
    try:
        yield a, a.urls[0].split("://", 1)[1]
    finally:
        a.stop()


@pytest.fixture
def token(srv: Server) -> str:
    with srv.client() as api:
        value: str = api.post("/credentials", json={}).json()["token"]
    return value


@pytest.fixture(scope="module")
def issuer() -> Iterator[str]:
    """A real OpenID provider (oidc-provider-mock) on a free loopback port: its issuer URL."""
    exe = shutil.which("oidc-provider-mock")
    if exe is None:
        pytest.fail("oidc-provider-mock is missing (scripts/test installs it)")
    port = free_port()
    proc = subprocess.Popen([exe, "-p", str(port), "--require-nonce", "true"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{url}/.well-known/openid-configuration",
                         verify=trust()).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            pytest.fail("oidc-provider-mock did not start")
        time.sleep(0.1)
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
