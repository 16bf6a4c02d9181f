"""A PostgreSQL database that goes silent (a network partition: packets dropped, nothing
reset) under a running server: tunnels already bound keep answering at once, through the SDK
agent and ours, on new connections and after an API change; the management API answers 503
with ``Retry-After`` and the error body within seconds instead of hanging; once the database
answers again, both recover without a restart."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.agent.test_agent import run_agent, write_config
from tests.conftest import BACKENDS
from tests.edge.agents import EdgeClient, agent
from tests.pgfaults import Link
from tests.server import Server, free_port, fresh_pg_database, start

pytestmark = pytest.mark.skipif("postgres" not in BACKENDS,
                                reason="PostgreSQL backend not selected")
FAST = 2.0  # seconds a request through a bound tunnel may take while the database is silent
API_WITHIN = 5.0  # seconds the API may take to answer 503
SILENT_FOR = 8.0  # seconds of traffic through the blackhole: past every database deadline


@pytest.fixture
def linked(tmp_path: Path) -> Iterator[tuple[Server, Link]]:
    link = Link()
    try:
        with fresh_pg_database() as url:
            srv = start(tmp_path / "srv", link.url(url))
            try:
                yield srv, link
            finally:
                link.mend()
                assert srv.stop() == 0
            log = srv.log()
            assert "Traceback" not in log and "never retrieved" not in log, log
    finally:
        link.close()


def timed(call: Callable[[], httpx.Response]) -> tuple[httpx.Response, float]:
    began = time.monotonic()
    r = call()
    return r, time.monotonic() - began


def fresh_get(srv: Server, url: str) -> tuple[httpx.Response, float]:
    """A request on a connection of its own (a new visitor), and how long it took."""
    with EdgeClient(srv, timeout=30) as edge:
        return timed(lambda: edge.get(url))


def serving(srv: Server, urls: list[str], seconds: float, tag: str) -> None:
    """Every tunnel answers 200 within ``FAST`` on new connections for ``seconds``."""
    until, n = time.monotonic() + seconds, 0
    while time.monotonic() < until or n == 0:
        for url in urls:
            r, took = fresh_get(srv, f"{url}/{tag}-{n}")
            assert r.status_code == 200 and took < FAST, (url, r.status_code, took, r.text)
        n += 1


def unavailable(r: httpx.Response, took: float) -> None:
    assert r.status_code == 503 and took < API_WITHIN, (r.status_code, took, r.text)
    assert r.headers.get("retry-after", "").isdigit(), r.headers
    body = r.json()
    assert body["error_code"] == "ERR_EDGEWAY_252" and body["status_code"] == 503, body
    assert body["msg"] and body["details"]["operation_id"].startswith("op_"), body


def test_bound_tunnels_and_the_api_through_a_silent_database(
        linked: tuple[Server, Link], service: int, tmp_path: Path) -> None:
    srv, link = linked
    with srv.client() as api:
        token = api.post("/credentials", json={}).json()["token"]
        made = api.post("/ip_policies", json={"description": "before"}).json()["id"]
    web = free_port()
    cfg = write_config(tmp_path / "a.yml", srv, token, web,
                       f"tunnels:\n  web:\n    proto: http\n    addr: {service}\n")
    ours = run_agent("web", "--config", str(cfg), web_port=web)
    sdk = agent(srv, token, {"kind": "https", "forward": f"http://127.0.0.1:{service}"})
    try:
        urls = [ours.api("GET", "/api/tunnels/web").json()["public_url"], sdk.urls[0]]
        serving(srv, urls, 0, "before")
        with srv.client() as api:
            api.timeout = httpx.Timeout(60)
            link.blackhole()  # the first call finds held connections that no longer answer
            unavailable(*timed(lambda: api.get(f"/ip_policies/{made}")))
            serving(srv, urls, SILENT_FOR, "silent")
            for call in (lambda: api.get(f"/ip_policies/{made}"), lambda: api.get("/tunnels"),
                         lambda: api.post("/ip_policies", json={"description": "during"}),
                         lambda: api.post("/ip_restrictions", json={
                             "type": "endpoints", "ip_policy_ids": [made]})):
                unavailable(*timed(call))
            serving(srv, urls, 2, "after-a-change")  # (the API's writes reload the edge)
            link.mend()
            deadline = time.monotonic() + 15  # a client that honours Retry-After
            while (r := api.get(f"/ip_policies/{made}")).status_code == 503:
                assert time.monotonic() < deadline, r.text
                time.sleep(0.2)
            assert r.status_code == 200 and r.json()["description"] == "before", r.text
            assert api.post("/ip_policies", json={"description": "after"}).status_code == 201
        serving(srv, urls, 0, "mended")
    finally:
        ours.stop()
        sdk.stop()
