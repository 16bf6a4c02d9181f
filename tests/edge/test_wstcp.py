"""websocket_tcp_converter on an HTTPS edge route: the edge accepts the WebSocket and the
backend is a plain TCP service (an echo): message bytes go to it raw and its bytes come back
as binary messages; a large message arrives whole; closing either side ends both."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
import websockets

from tests.edge.agents import ca_context
from tests.edge.test_edges import made, route
from tests.server import Server

HOST = "ws.example.com"


@pytest.fixture
def converted(srv: Server, echo_port: int) -> None:
    """An HTTPS edge whose route converts WebSockets, in front of a TCP echo service."""
    with srv.client() as api:
        for edge in api.get("/edges/https").json()["https_edges"]:
            api.delete(f"/edges/https/{edge['id']}")  # the last test's
        r = api.post("/reserved_domains", json={"domain": HOST})  # (or the last test's)
        assert r.status_code == 201 or "already" in r.json()["msg"], r.text
        edge = made(api, "/edges/https", {"hostports": [f"{HOST}:443"]})
        echo = made(api, "/backends/static", {"address": f"127.0.0.1:{echo_port}"})
        route(api, edge["id"], "path_prefix", "/", echo["id"], websocket_tcp_converter={})


@pytest.mark.usefixtures("converted")
def test_websocket_messages_become_a_tcp_stream(srv: Server) -> None:

    async def talk() -> list[bytes]:
        async with websockets.connect(
                f"wss://{HOST}/raw", host="127.0.0.1", port=srv.https_port,
                ssl=ca_context(srv), server_hostname=HOST, max_size=None) as ws:
            got = []
            await ws.send(b"ping")
            got.append(await ws.recv())
            await ws.send("text goes as its bytes")
            got.append(await ws.recv())
            big = bytes(range(256)) * 4096  # 1 MiB: the echo returns it in pieces
            await ws.send(big)
            back = b""
            while len(back) < len(big):
                piece = await ws.recv()
                assert isinstance(piece, bytes)  # binary messages
                back += piece
            got.append(b"big ok" if back == big else b"big differs")
            return [bytes(g) if not isinstance(g, str) else g.encode() for g in got]

    t0 = time.monotonic()
    assert asyncio.run(talk()) == [b"ping", b"text goes as its bytes", b"big ok"]
    assert time.monotonic() - t0 < 3  # the close handshake ends the connection at once


@pytest.mark.usefixtures("converted")
def test_a_plain_request_on_that_route_is_not_converted(srv: Server) -> None:
    # without an upgrade the route is plain HTTP: its backend (an echo) sees HTTP, echoes the
    # request back, which is not a valid response: the client gets a 502 page
    with socket.create_connection(("127.0.0.1", srv.https_port), timeout=20) as raw, \
            ca_context(srv).wrap_socket(raw, server_hostname=HOST) as s:
        s.sendall(f"GET /x HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 502 ")
