"""Event delivery tests: a local HTTPS capture service (Datadog, Azure), moto_server for the
AWS targets, and one Edgeway server per backend whose event targets point at them."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from tests.conftest import BACKENDS, Shared
from tests.events import capture
from tests.events.capture import Capture
from tests.server import Server, free_port, fresh_pg_database, start, trust

T = TypeVar("T")
AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1"}


def wait_for(what: str, check: Callable[[], T | None], timeout: float = 20.0,
             every: float = 0.05) -> T:
    """Poll ``check`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what} (last: {got!r})")
        time.sleep(every)


def wait_len(what: str, fetch: Callable[[], list[T]], n: int, timeout: float = 20.0
             ) -> list[T]:
    """``fetch()`` once it has at least ``n`` items."""
    return wait_for(what, lambda: got if len(got := fetch()) >= n else None, timeout)


@pytest.fixture(scope="session")
def cap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Capture]:
    with capture.running(Path(tmp_path_factory.mktemp("capture"))) as c:
        yield c


@pytest.fixture(scope="session")
def moto() -> Iterator[str]:
    """moto_server on loopback: its URL."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(f"{url}/moto-api/", timeout=1, verify=trust()).status_code == 200
        except httpx.HTTPError:
            return proc.poll() is not None and pytest.fail("moto_server exited")
    wait_for("moto_server", up, 30)
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def event_args(cap: Capture, moto: str, *extra: str) -> list[str]:
    return ["--events-datadog-url", cap.url, "--events-azure-login-url", cap.url,
            "--events-azure-ingestion-url", cap.url,
            "--events-aws-endpoint-url", moto, "--events-ca-file", str(cap.ca_file),
            "--events-retry", "0.2", "--events-attempts", "4", "--events-queue", "50", *extra]


@contextmanager
def events_server(backend: str, data_dir: Path, cap: Capture, moto: str) -> Iterator[Server]:
    with fresh_pg_database() if backend == "postgres" else nullcontext() as url:
        srv = start(data_dir, url, *event_args(cap, moto), env=AWS_ENV)
        try:
            yield srv
        finally:
            code = srv.stop()
        assert code == 0, f"server did not shut down cleanly ({code}):\n{srv.log()}"


@pytest.fixture(scope="session")
def event_servers(cap: Capture, moto: str) -> Iterator[Shared]:
    """The events servers of the run (after ``cap`` and ``moto``: stopped before them)."""
    with ExitStack() as stack:
        yield Shared(stack)


@pytest.fixture(scope="module", params=BACKENDS)
def esrv(request: pytest.FixtureRequest, event_servers: Shared,
         tmp_path_factory: pytest.TempPathFactory, cap: Capture, moto: str) -> Server:
    backend = request.param
    return event_servers.get(backend, lambda: events_server(
        backend, Path(tmp_path_factory.mktemp(f"ev-{backend}")), cap, moto))


@pytest.fixture
def api(esrv: Server) -> Iterator[httpx.Client]:
    with esrv.client() as client:
        yield client


def made(api: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    r = api.post(path, json=body)
    assert r.status_code == 201, r.text
    out: dict[str, Any] = r.json()
    return out


@contextmanager
def subscribed(api: httpx.Client, target: dict[str, Any], sources: list[dict[str, Any]]
               ) -> Iterator[dict[str, Any]]:
    """A destination for ``target`` with a subscription of ``sources`` to it (both deleted
    afterwards): the destination."""
    dest = made(api, "/event_destinations", {"target": target})
    sub = made(api, "/event_subscriptions", {"sources": sources,
                                             "destination_ids": [dest["id"]]})
    try:
        yield dest
    finally:
        api.delete(f"/event_subscriptions/{sub['id']}")
        api.delete(f"/event_destinations/{dest['id']}")


def delivery(api: httpx.Client, dest_id: str) -> dict[str, Any]:
    out: dict[str, Any] = api.get(f"/event_destinations/{dest_id}").json()["delivery"]
    return out
