"""What an agent and the traffic events are told about a client behind HAProxy (PROXY protocol
v1 and v2): a raw agent binds a TCP tunnel and an HTTPS endpoint, HAProxy in TCP mode fronts
the TCP tunnel's port and the HTTPS listener, and each proxy stream's ``ClientAddr`` is the
client's own address and port (not HAProxy's), as are the HTTP request's ``X-Forwarded-For``
and the ``tcp_connection_closed.v0`` and ``http_request_complete.v0`` events."""

from __future__ import annotations

import asyncio
import json
import secrets
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from edgeway.tunnel.muxado.stream import MuxStream
from tests.edge.agents import ca_context
from tests.edge.haproxy import SOURCE, Front, running
from tests.events import capture
from tests.events.capture import Capture
from tests.events.conftest import subscribed, wait_for
from tests.events.test_changes import arrived, monitoring
from tests.server import Server, start
from tests.tunnel.raw import Agent, port_of

CLIENT = "127.0.0.7"
EVENTS = [{"type": "tcp_connection_closed.v0"}, {"type": "http_request_complete.v0"}]


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Capture]]:
    """A node behind HAProxy whose traffic events go to a Datadog stand-in."""
    base = tmp_path_factory.mktemp("proxied-streams")
    with capture.running(base) as cap:
        srv = start(base / "node", None, "--proxy-protocol", "--trusted-proxies", SOURCE,
                    "--events-datadog-url", cap.url, "--events-ca-file", str(cap.ca_file),
                    "--events-retry", "0.2")
        try:
            yield srv, cap
        finally:
            assert srv.stop() == 0, srv.log()


async def preamble(stream: MuxStream) -> dict[str, Any]:
    """The proxy header a stream to the agent begins with (type, length, JSON)."""
    head = await stream.readexactly(12)
    out: dict[str, Any] = json.loads(await stream.readexactly(int.from_bytes(head[4:],
                                                                             "little")))
    return out


async def serve(agent: Agent, seen: list[tuple[dict[str, Any], bytes]]) -> None:
    """The agent's side: note each stream's header and first bytes; answer HTTP with 200,
    TCP with ``hi``."""
    while (stream := await agent.conn.accept()) is not None:
        header = await preamble(stream)
        if header["Proto"] == "tcp":
            seen.append((header, b""))
            await stream.write(b"hi", eof=True)
            continue
        request = b""
        while b"\r\n\r\n" not in request:
            request += await stream.read()
        seen.append((header, request))
        await stream.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n"
                           b"\r\nok", eof=True)


def tcp_exchange(port: int) -> int:
    """Connect from CLIENT through HAProxy's ``port``, read the agent's answer: the client's
    port."""
    with socket.create_connection(("127.0.0.1", port), timeout=20,
                                  source_address=(CLIENT, 0)) as sock:
        got = b""
        while chunk := sock.recv(100):
            got += chunk
        assert got == b"hi"
        return int(sock.getsockname()[1])


def https_exchange(port: int, host: str, srv: Server) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=20,
                                  source_address=(CLIENT, 0)) as raw:
        client_port = int(raw.getsockname()[1])
        with ca_context(srv).wrap_socket(raw, server_hostname=host.rsplit(":", 1)[0]) as tls:
            tls.sendall(f"GET /x HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
                        .encode())
            got = b""
            while chunk := tls.recv(100):
                got += chunk
            assert got.startswith(b"HTTP/1.1 200 "), got
    return client_port


def events(cap: Capture, tags: str, kind: str) -> list[dict[str, Any]]:
    return [e["event"]["object"]["conn"] for e in arrived(cap, tags)
            if e["event"]["event_type"] == kind]


@pytest.mark.parametrize("send", ["send-proxy-v2", "send-proxy"])
def test_agents_and_events_are_told_the_client_behind_haproxy(
        node: tuple[Server, Capture], tmp_path: Path, send: str) -> None:
    srv, cap = node
    tags = f"run:{secrets.token_hex(4)}"
    with srv.client() as api:
        token = api.post("/credentials", json={}).json()["token"]

    async def main() -> None:
        agent = await Agent.connect(srv, token)
        seen: list[tuple[dict[str, Any], bytes]] = []
        answering = asyncio.create_task(serve(agent, seen))
        tcp_port = port_of(await agent.bind_tcp())
        host = (await agent.bind_http())["URL"].split("://")[1]
        fronts = {"tcp": Front((tcp_port,), send), "https": Front((srv.https_port,), send)}
        with running(tmp_path, fronts) as lb, srv.client() as api, \
                subscribed(api, monitoring(tags), EVENTS):
            tcp = lb.ports["tcp"]
            # (until the sink routes the new subscription: a connection's event arrives)
            await asyncio.to_thread(wait_for, "the subscription", lambda: tcp_exchange(tcp) and
                                    events(cap, tags, "tcp_connection_closed.v0"))
            tcp_client = await asyncio.to_thread(tcp_exchange, tcp)
            https_client = await asyncio.to_thread(https_exchange, lb.ports["https"], host,
                                                   srv)
            want = {"tcp": f"{CLIENT}:{tcp_client}", "https": f"{CLIENT}:{https_client}"}
            assert {h["Proto"]: h["ClientAddr"] for h, _ in seen[-2:]} == want
            request = seen[-1][1].decode()
            assert f"\r\nX-Forwarded-For: {CLIENT}\r\n" in request, request
            wanted = [("tcp_connection_closed.v0", tcp_client),
                      ("http_request_complete.v0", https_client)]
            for kind, client_port in wanted:
                conn = {"client_ip": CLIENT, "client_port": client_port}
                await asyncio.to_thread(wait_for, kind, lambda k=kind, c=conn: [
                    e for e in events(cap, tags, k) if c.items() <= e.items()])
        answering.cancel()
        await agent.conn.close()

    asyncio.run(main())

