"""Three nodes on loopback sharing one PostgreSQL database, each with ``--node-addr``: an
official SDK agent connected to node A is served through nodes B and C (HTTP, HTTPS, a
WebSocket, TLS passthrough), with the modules the agent asked for enforced where the
connection arrives; two agents on different nodes share a pooled name and are both served
from the third; a name one node's agent holds cannot be bound through another."""

from __future__ import annotations

import asyncio
import base64
import secrets
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
import websockets

from tests.conftest import BACKENDS
from tests.edge import tls_upstream, upstream
from tests.edge.agents import EdgeClient, agent, ca_context, parse_responses, read_all
from tests.server import Server, free_block, free_port, fresh_pg_database, start
from tests.sshgw.client import SshUser

pytestmark = pytest.mark.skipif("postgres" not in BACKENDS,
                                reason="nodes share a PostgreSQL database")


def node(base: Path, name: str, url: str, key: str, token: str | None,
         *extra: str) -> Server:
    return start(base / name, url, "--node-addr", f"127.0.0.1:{free_port()}", *extra,
                 token=token, env={"EDGEWAY_SECRET_KEY": key})


# Each node publishes TCP tunnels on an address of its own (as nodes on different machines
# would), from one range of ports: 127.0.0.1 for A, .2 for B, .3 for C.
TCP_HOSTS = ("127.0.0.1", "127.0.0.2", "127.0.0.3")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, ...]]:
    base = tmp_path_factory.mktemp("cluster")
    key = base64.b64encode(secrets.token_bytes(32)).decode()
    block = free_block(20)
    ports = f"{block[0]}-{block[-1]}"
    with fresh_pg_database() as url:
        a = node(base, "a", url, key, None, "--tcp-host", "127.0.0.1", "--tcp-ports", ports)
        b = node(base, "b", url, key, a.token, "--tcp-host", "127.0.0.2", "--tcp-ports", ports)
        c = node(base, "c", url, key, a.token, "--tcp-host", "127.0.0.3", "--tcp-ports", ports)
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


FOLLOWS_WITHIN = 2.0  # seconds for an unbind on one node to reach the others


def through(srv: Server, url: str, path: str = "/x", **kw: object) -> httpx.Response:
    with EdgeClient(srv) as web:
        return web.get(url + path, **kw)


def gone(srv: Server, url: str) -> float:
    """Seconds until ``srv`` answers 404 for ``url`` (its tunnel ended on another node)."""
    began = time.monotonic()
    while through(srv, url).status_code != 404:
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
            # (the bind was answered once every node served it: no 404 from the first request)
            for srv in (a, b, c):
                r = through(srv, https, "/x")
                assert (r.status_code, r.text) == (200, "svc /x"), (srv.base_url, r.text)
                assert through(srv, http).status_code == 401  # (the agent's basic auth)
                r = through(srv, http, auth=("user", "secret-password"))
                assert (r.status_code, r.text) == (200, "svc /x")
        finally:
            bound.stop()
        for srv in (a, b, c):
            gone(srv, https)


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


def test_tcp_tls_and_websocket_through_the_other_nodes(
        cluster: tuple[Server, ...], token: str, tmp_path: Path) -> None:
    a, b, c = cluster
    with a.client() as api:
        api.post("/reserved_domains", json={"domain": "raw.cluster.example"})
        api.post("/reserved_domains", json={"domain": "live.cluster.example"})
        edge = api.post("/edges/https", json={"hostports": ["live.cluster.example:443"]}).json()
        group = api.post("/backends/tunnel_group", json={"labels": {"svc": "live"}}).json()
        assert api.post(f"/edges/https/{edge['id']}/routes", json={
            "match_type": "path_prefix", "match": "/",
            "backend": {"backend_id": group["id"]}}).status_code == 201
    with upstream.echo() as echo, upstream.running("svc") as web, \
            tls_upstream.running("raw.cluster.example", tmp_path) as (tls_up, tls_cert):
        bound = agent(a, token, {"kind": "tcp", "forward": f"tcp://127.0.0.1:{echo}"},
                      {"kind": "tls", "domain": "raw.cluster.example",
                       "forward": f"tcp://127.0.0.1:{tls_up}"},
                      {"kind": "labeled", "labels": {"svc": "live"},
                       "forward": f"http://127.0.0.1:{web}"})
        try:
            port = int(bound.urls[0].rsplit(":", 1)[1])
            for srv, host in zip(cluster, TCP_HOSTS, strict=True):
                assert _echoed(host, port, b"ping over tcp") == b"ping over tcp", srv.base_url
            for srv in (b, c):  # (passthrough: verified against the upstream's own cert)
                assert tls_upstream.ask(srv.https_port, "raw.cluster.example", tls_cert,
                                        b"hi\n") == b"raw.cluster.example got hi\n"
                assert asyncio.run(_ws(srv, "live.cluster.example")) == "svc:hi"
        finally:
            bound.stop()
        with pytest.raises(OSError):  # (the port is closed on every node with its tunnel)
            _until_refused(TCP_HOSTS[1], port)


def _echoed(host: str, port: int, data: bytes) -> bytes:
    """``data`` sent to ``host:port`` and what comes back (every node listens on the port
    once the bind was answered: no retry)."""
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
        return out


def _until_refused(host: str, port: int) -> None:
    began = time.monotonic()
    while time.monotonic() - began < FOLLOWS_WITHIN:
        socket.create_connection((host, port), timeout=5).close()
        time.sleep(0.01)


async def _ws(srv: Server, host: str) -> str:
    async with websockets.connect(f"wss://{host}/ws", host="127.0.0.1", port=srv.https_port,
                                  ssl=ca_context(srv), server_hostname=host) as ws:
        await ws.send("hi")
        return str(await ws.recv())


def test_the_api_of_any_node_commands_a_session_another_node_holds(
        cluster: tuple[Server, ...], token: str) -> None:
    a, b, _ = cluster
    with b.client() as api:
        before = {s["id"] for s in api.get("/tunnel_sessions").json()["tunnel_sessions"]}
    with upstream.running("svc") as port:
        bound = agent(a, token, {"kind": "https", "forward": f"http://127.0.0.1:{port}"})
        try:
            with b.client() as api:
                (session,) = [s for s in api.get("/tunnel_sessions").json()["tunnel_sessions"]
                              if s["id"] not in before]
                # the SDK's answer travels back through node A: it has no restart callback
                r = api.post(f"/tunnel_sessions/{session['id']}/restart")
                assert r.status_code == 400, r.text
                assert "has not defined a callback" in r.json()["msg"]
                r = api.post(f"/tunnel_sessions/ts_{'0' * 27}/restart")
                assert r.status_code == 404, r.text
        finally:
            bound.stop()


def test_a_tunnel_group_with_agents_on_two_nodes_is_served_round_robin_from_a_third(
        cluster: tuple[Server, ...], token: str) -> None:
    a, b, c = cluster
    with a.client() as api:
        api.post("/reserved_domains", json={"domain": "group.cluster.example"})
        edge = api.post("/edges/https", json={"hostports": ["group.cluster.example:443"]}).json()
        group = api.post("/backends/tunnel_group", json={"labels": {"svc": "group"}}).json()
        assert api.post(f"/edges/https/{edge['id']}/routes", json={
            "match_type": "path_prefix", "match": "/",
            "backend": {"backend_id": group["id"]}}).status_code == 201
    with upstream.running("left") as left, upstream.running("right") as right:
        one = agent(a, token, {"kind": "labeled", "labels": {"svc": "group"},
                               "forward": f"http://127.0.0.1:{left}"})
        two = agent(b, token, {"kind": "labeled", "labels": {"svc": "group"},
                               "forward": f"http://127.0.0.1:{right}"})
        try:
            answers = [through(c, "https://group.cluster.example").text for _ in range(10)]
            assert 4 <= answers.count("left /x") <= 6, answers  # (in turn)
            assert answers.count("left /x") + answers.count("right /x") == 10, answers
        finally:
            one.stop()
            two.stop()


def test_an_ssh_client_sees_the_requests_every_node_served_for_it(
        cluster: tuple[Server, ...], tmp_path: Path) -> None:
    """``ssh -R ... http`` on node A: requests through B and C show on the client's terminal
    as those through A do, in the order each node served them."""
    a, b, c = cluster
    user = SshUser(a, tmp_path / "ssh")
    try:
        with a.client() as api, upstream.running("svc") as web:
            user.credential(api)
            ssh = user.start(f"0:localhost:{web}", command=["http"])
            [url] = ssh.urls()
            for srv, path in ((a, "/via-a"), (b, "/via-b-1"), (b, "/via-b-2"), (c, "/via-c")):
                assert through(srv, url, path).text == f"svc {path}", srv.base_url
            for path in ("/via-a", "/via-b-2", "/via-c"):
                ssh.wait_for(rf"GET\s+{path}  200 OK")
            text = ssh.stdout()
            assert text.index("/via-b-1 ") < text.index("/via-b-2 "), text
            ssh.stop()
    finally:
        user.close()


def test_a_bind_is_answered_once_every_node_serves_it(
        cluster: tuple[Server, ...], token: str) -> None:
    """The agent is told its tunnel is up only when the other nodes serve it: the first
    request through B and C, sent on connections opened before the bind and the moment the
    SDK's ``listen`` returned (well inside the milliseconds a notification takes), is served,
    and the TCP port already listens on each node's address."""
    import ngrok  # (the SDK in this process: nothing between its answer and the requests)

    a, b, c = cluster
    socks = [socket.create_connection(("127.0.0.1", srv.http_port), timeout=30)
             for srv in (b, c)]

    async def bind_and_ask(forward: str, echo: int) -> tuple[list[bytes], list[bytes]]:
        session = await (ngrok.SessionBuilder().authtoken(token)
                         .server_addr(f"localhost:{a.tunnel_port}")
                         .ca_cert(bytearray((a.data_dir / "ca.pem").read_bytes())).connect())
        try:
            listener = await session.http_endpoint().scheme("HTTP").listen_and_forward(forward)
            host = urlsplit(listener.url()).hostname
            for sock in socks:
                sock.sendall(f"GET /first HTTP/1.1\r\nHost: {host}\r\n"
                             "Connection: close\r\n\r\n".encode())
            answers = [read_all(sock) for sock in socks]
            tcp = await session.tcp_endpoint().listen_and_forward(f"tcp://127.0.0.1:{echo}")
            port = int(tcp.url().rsplit(":", 1)[1])
            echoed = [_echoed(addr, port, b"first") for addr in TCP_HOSTS[1:]]
            return answers, echoed
        finally:
            await session.close()

    try:
        with upstream.running("svc") as port, upstream.echo() as echo:
            answers, echoed = asyncio.run(bind_and_ask(f"http://127.0.0.1:{port}", echo))
    finally:
        for sock in socks:
            sock.close()
    assert [parse_responses(raw) for raw in answers] == [[(200, b"svc /first")]] * 2
    assert echoed == [b"first", b"first"]
