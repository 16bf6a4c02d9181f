"""Two nodes on one PostgreSQL database hear each other's writes at once (LISTEN/NOTIFY),
not at their next poll (every 5 s): an API key deleted through one is refused by the other,
an IP restriction made through one is enforced by the other's edge on a tunnel an SDK agent
bound there; and after the listening connection is killed, it comes back and does so again.

Each change is made right after the other node filled its cache from the old state, so that
only the notification can bring the new one within the deadline (the poll would take up to
5 s)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

import asyncpg
import httpx
import pytest

from tests.conftest import BACKENDS
from tests.edge import upstream
from tests.edge.agents import agent
from tests.server import PG_URL, Server, fresh_pg_database, start, trust

FOLLOWS_WITHIN = 1.5  # seconds; the notification takes milliseconds, the poll up to 5 s

pytestmark = pytest.mark.skipif("postgres" not in BACKENDS,
                                reason="nodes share a PostgreSQL database")


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Server, str]]:
    base = tmp_path_factory.mktemp("nodes")
    with fresh_pg_database() as url:
        a = start(base / "a", url)
        b = start(base / "b", url, token=a.token)
        try:
            yield a, b, url
        finally:
            assert b.stop() == 0 and a.stop() == 0


def follows(check: Callable[[], bool], what: str) -> float:
    """Seconds until ``check()`` holds; fails after FOLLOWS_WITHIN."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > FOLLOWS_WITHIN:
            raise AssertionError(f"{what} did not follow within {FOLLOWS_WITHIN} s")
        time.sleep(0.01)
    return time.monotonic() - started


def test_a_key_deleted_through_one_node_is_refused_by_the_other(
        nodes: tuple[Server, Server, str]) -> None:
    a, b, _ = nodes
    with b.client() as api:
        made = api.post("/api_keys", json={"description": "short-lived"}).json()
    key = {"Authorization": f"Bearer {made['token']}", "Edgeway-Version": "2"}
    assert httpx.get(f"{a.base_url}/api_keys", headers=key,
                     verify=trust()).status_code == 200  # (cached)
    with b.client() as api:
        assert api.delete(f"/api_keys/{made['id']}").status_code == 204
    follows(lambda: httpx.get(f"{a.base_url}/api_keys", headers=key,
                              verify=trust()).status_code in (401, 403),
            "node A refusing the deleted key")


def _restricting(api: httpx.Client) -> str:
    pid: str = api.post("/ip_policies", json={}).json()["id"]
    for action, cidr in (("allow", "0.0.0.0/0"), ("deny", "127.0.0.1/32")):
        r = api.post("/ip_policy_rules", json={"ip_policy_id": pid, "cidr": cidr,
                                               "action": action})
        assert r.status_code == 201, r.text
    return pid


def test_an_ip_restriction_made_through_one_node_is_enforced_by_the_other(
        nodes: tuple[Server, Server, str]) -> None:
    a, b, url = nodes
    with a.client() as api:
        token = api.post("/credentials", json={}).json()["token"]
    with upstream.running("svc") as port:
        bound = agent(a, token, {"kind": "http", "forward": f"http://127.0.0.1:{port}"})
        try:
            host = bound.urls[0].split("://", 1)[1]

            def status() -> int:
                return httpx.get(f"http://127.0.0.1:{a.http_port}/", headers={"Host": host},
                                 timeout=10, verify=trust()).status_code
            assert status() == 200
            with b.client() as api:
                pid = _restricting(api)
                assert status() == 200  # (node A has loaded the restrictions: none)
                rid = api.post("/ip_restrictions", json={
                    "type": "endpoints", "enforced": True, "ip_policy_ids": [pid]}).json()["id"]
            follows(lambda: status() == 403, "node A's edge enforcing the restriction")
            _kill_listeners(url)  # the link is lost, and comes back
            with b.client() as api:
                assert api.delete(f"/ip_restrictions/{rid}").status_code == 204
            follows(lambda: status() == 200, "node A's edge after the link came back")
        finally:
            bound.stop()


def _kill_listeners(url: str) -> None:
    """Terminate every node's listening connection (they reconnect on their own)."""
    async def kill() -> int:
        conn = await asyncpg.connect(PG_URL)
        try:
            rows = await conn.fetch(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 "
                "AND (query LIKE 'LISTEN%' OR query LIKE '%pg_notify%')",
                url.rsplit("/", 1)[1])
            return len(rows)
        finally:
            await conn.close()
    assert asyncio.run(kill()) >= 1
