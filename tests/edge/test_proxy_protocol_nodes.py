"""Two nodes on one PostgreSQL database behind one HAProxy (TCP mode, round robin, a
``server`` line per node, PROXY protocol v2): an HTTPS edge whose route's ip_restriction
module allows one client address serves that client through either node, the upstream
seeing its address in ``X-Forwarded-For``, and refuses another on either node."""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import BACKENDS
from tests.edge import upstream
from tests.edge.agents import parse_responses, read_all
from tests.edge.haproxy import SOURCE, Front, running
from tests.edge.test_edges import made, route
from tests.server import Server, fresh_pg_database, start

pytestmark = pytest.mark.skipif("postgres" not in BACKENDS,
                                reason="nodes share a PostgreSQL database")

ALLOWED, DENIED = "127.0.0.7", "127.0.0.8"
HOST = "lb.example.com"
SHARED = ("secret.key", "ca.pem", "ca.key.sealed")  # the platform's seal key and CA


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Server]]:
    base = tmp_path_factory.mktemp("lb-nodes")
    args = ("--proxy-protocol", "--trusted-proxies", SOURCE)
    with fresh_pg_database() as url:
        a = start(base / "a", url, *args)
        (base / "b").mkdir()
        for name in SHARED:  # one platform CA: clients trust one, whichever node answers
            shutil.copy2(base / "a" / name, base / "b" / name)
        b = start(base / "b", url, *args, token=a.token)
        try:
            yield a, b
        finally:
            assert b.stop() == 0 and a.stop() == 0


def get(context: ssl.SSLContext, port: int, source: str) -> tuple[int, bytes]:
    raw = socket.create_connection(("127.0.0.1", port), timeout=20, source_address=(source, 0))
    with context.wrap_socket(raw, server_hostname=HOST) as tls:
        tls.sendall(f"GET /headers HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n"
                    .encode())
        return parse_responses(read_all(tls))[0]


def direct(context: ssl.SSLContext, node: Server) -> int | None:
    """A direct client's (127.0.0.1: refused once the edge is served) status from ``node``;
    None while its certificate for HOST is not there yet."""
    try:
        return get(context, node.https_port, "127.0.0.1")[0]
    except ssl.SSLCertVerificationError:
        return None


def restricted_edge(api: httpx.Client, service: int) -> None:
    """An HTTPS edge for HOST whose one route lets ALLOWED in, to ``service``."""
    made(api, "/reserved_domains", {"domain": HOST})
    edge = made(api, "/edges/https", {"hostports": [f"{HOST}:443"]})
    policy = made(api, "/ip_policies", {"description": "the one client"})
    made(api, "/ip_policy_rules", {"ip_policy_id": policy["id"], "cidr": f"{ALLOWED}/32",
                                   "action": "allow"})
    backend = made(api, "/backends/static", {"address": f"127.0.0.1:{service}"})
    route(api, edge["id"], "path_prefix", "/", backend["id"],
          ip_restriction={"ip_policy_ids": [policy["id"]]})


def test_either_node_behind_one_haproxy_sees_the_client(
        nodes: tuple[Server, Server], tmp_path_factory: pytest.TempPathFactory) -> None:
    a, b = nodes
    context = ssl.create_default_context(cafile=str(a.data_dir / "ca.pem"))
    with upstream.running("svc") as service:
        with a.client() as api:
            restricted_edge(api, service)
        deadline = time.monotonic() + 20
        while {direct(context, node) for node in nodes} != {403}:  # both serve the edge
            assert time.monotonic() < deadline, "the nodes do not serve the edge"
            time.sleep(0.1)
        fronts = {"https": Front((a.https_port, b.https_port))}
        with running(tmp_path_factory.mktemp("haproxy"), fronts) as lb:
            for _ in range(2):
                for source, want in ((ALLOWED, 200), (DENIED, 403)):
                    status, body = get(context, lb.ports["https"], source)
                    assert status == want, body
                    if want == 200:
                        headers = json.loads(body)["headers"]
                        assert [v for k, v in headers if k == "x-forwarded-for"] == [ALLOWED]
            sessions = lb.sessions("https")
    assert sessions["n0"] >= 1 and sessions["n1"] >= 1, sessions  # (round robin: both)
