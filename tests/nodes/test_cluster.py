"""Three nodes on loopback sharing one PostgreSQL database, each with ``--node-addr``: an
official SDK agent connected to node A is served through nodes B and C (HTTP, HTTPS, a
WebSocket, TLS passthrough), with the modules the agent asked for enforced where the
connection arrives; two agents on different nodes share a pooled name and are both served
from the third; a name one node's agent holds cannot be bound through another."""

from __future__ import annotations

import base64
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tests.conftest import BACKENDS
from tests.edge import upstream
from tests.edge.agents import EdgeClient, agent
from tests.server import Server, free_port, fresh_pg_database, start

pytestmark = pytest.mark.skipif("postgres" not in BACKENDS,
                                reason="nodes share a PostgreSQL database")


def node(base: Path, name: str, url: str, key: str, token: str | None = None,
         *extra: str) -> Server:
    return start(base / name, url, "--node-addr", f"127.0.0.1:{free_port()}", *extra,
                 token=token, env={"EDGEWAY_SECRET_KEY": key})


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, ...]]:
    base = tmp_path_factory.mktemp("cluster")
    key = base64.b64encode(secrets.token_bytes(32)).decode()
    with fresh_pg_database() as url:
        a = node(base, "a", url, key)
        b = node(base, "b", url, key, a.token)
        c = node(base, "c", url, key, a.token)
        try:
            yield a, b, c
        finally:
            for srv in (c, b, a):
                srv.stop()


@pytest.fixture(scope="module")
def token(cluster: tuple[Server, ...]) -> str:
    with cluster[0].client() as api:
        made: str = api.post("/credentials", json={}).json()["token"]
    return made


FOLLOWS_WITHIN = 2.0  # seconds for a bind on one node to be served by the others


def through(srv: Server, url: str, path: str = "/x", **kw: object) -> httpx.Response:
    with EdgeClient(srv) as web:
        return web.get(url + path, **kw)  # type: ignore[arg-type]


def served(srv: Server, url: str, gone: bool = False) -> float:
    """Seconds until ``srv`` stops answering 404 for ``url`` (a bind on another node), or
    with ``gone`` until it answers 404 (the tunnel ended)."""
    began = time.monotonic()
    while (through(srv, url).status_code == 404) != gone:
        assert time.monotonic() - began < FOLLOWS_WITHIN, f"{url}: {srv.base_url} did not follow"
        time.sleep(0.01)
    return time.monotonic() - began


def test_one_ca_for_every_node(cluster: tuple[Server, ...]) -> None:
    pems = {(srv.data_dir / "ca.pem").read_text() for srv in cluster}
    assert len(pems) == 1


def test_an_agent_on_one_node_is_served_through_the_others(
        cluster: tuple[Server, ...], token: str) -> None:
    a, b, c = cluster
    with upstream.running("svc") as port:
        bound = agent(a, token, {"kind": "https", "forward": f"http://127.0.0.1:{port}"},
                      {"kind": "http", "forward": f"http://127.0.0.1:{port}",
                       "basic_auth": ["user", "secret-password"]})
        try:
            https, http = bound.urls
            for srv in (b, c):
                served(srv, https)
            for srv in (a, b, c):
                r = through(srv, https, "/x")
                assert (r.status_code, r.text) == (200, "svc /x"), (srv.base_url, r.text)
                assert through(srv, http).status_code == 401  # (the agent's basic auth)
                r = through(srv, http, auth=("user", "secret-password"))
                assert (r.status_code, r.text) == (200, "svc /x")
        finally:
            bound.stop()
        for srv in (a, b, c):
            served(srv, https, gone=True)


def test_two_agents_on_two_nodes_pool_one_name(cluster: tuple[Server, ...], token: str) -> None:
    a, b, c = cluster
    with a.client() as api:
        assert api.post("/reserved_domains", json={"domain": "pool.cluster.example"}
                        ).status_code == 201
    with upstream.running("left") as left, upstream.running("right") as right:
        one = agent(a, token, {"kind": "https", "domain": "pool.cluster.example", "pool": True,
                               "forward": f"http://127.0.0.1:{left}"})
        two = agent(b, token, {"kind": "https", "domain": "pool.cluster.example", "pool": True,
                               "forward": f"http://127.0.0.1:{right}"})
        try:
            # (the same name; the port in each URL is its node's HTTPS listener's)
            assert urlsplit(one.urls[0]).hostname == urlsplit(two.urls[0]).hostname
            served(c, one.urls[0])
            seen = {through(c, one.urls[0]).text for _ in range(12)}
            assert seen == {"left /x", "right /x"}
        finally:
            one.stop()
            two.stop()


def test_a_name_held_on_one_node_is_refused_on_another(
        cluster: tuple[Server, ...], token: str) -> None:
    a, b, _ = cluster
    with a.client() as api:
        api.post("/reserved_domains", json={"domain": "held.cluster.example"})
    with upstream.running("svc") as port:
        one = agent(a, token, {"kind": "https", "domain": "held.cluster.example",
                               "forward": f"http://127.0.0.1:{port}"})
        try:
            two = agent(b, token, {"kind": "https", "domain": "held.cluster.example",
                                   "forward": f"http://127.0.0.1:{port}"})
            try:
                assert "error" in two.listeners[0], two.listeners
                assert "held.cluster.example" in two.listeners[0]["error"]
            finally:
                two.stop()
        finally:
            one.stop()
