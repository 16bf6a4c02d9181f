"""Abuse reports decided: a banned hostname is taken down on real traffic (HTTP gets a 403
page with its error code, TLS and TCP connections are closed), no agent may bind it, and
unbanned it is served again. Over the official SDK, a raw TCP agent and the real server."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import httpx

from tests.edge.agents import EdgeClient, agent
from tests.server import Server
from tests.tunnel.raw import Agent


def decide(api: httpx.Client, report: dict[str, Any], hostname: str, status: str) -> None:
    r = api.patch(f"/abuse_reports/{report['id']}",
                  json={"hostnames": [{"hostname": hostname, "status": status}]})
    assert r.status_code == 200, r.text


def until(what: str, check: Callable[[], bool], seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {seconds} s"
        time.sleep(0.05)


def test_a_banned_host_is_taken_down_and_unbanned_served_again(
        srv: Server, token: str, service: int) -> None:
    a = agent(srv, token, {"kind": "https", "forward": f"http://127.0.0.1:{service}"})
    url = a.urls[0]
    host = urlsplit(url).hostname or ""
    try:
        with EdgeClient(srv) as web, srv.client() as api:
            assert web.get(url + "/").status_code == 200
            report = api.post("/abuse_reports", json={"urls": [url + "/login"]}).json()
            assert web.get(url + "/").status_code == 200  # (pending: still served)
            decide(api, report, host, "BANNED")
            r = web.get(url + "/")  # (the API's write is in the next snapshot)
            assert r.status_code == 403, r.text
            assert r.headers["Edgeway-Error-Code"] == "ERR_EDGEWAY_4018"
            assert "taken down" in r.text and "svc" not in r.text
            again = agent(srv, token, {"kind": "https", "domain": host,
                                       "forward": f"http://127.0.0.1:{service}"})
            try:
                [refused] = again.listeners
                assert "taken down after the abuse report" in refused.get("error", ""), refused
                assert report["id"] in refused["error"]
            finally:
                again.stop()
            decide(api, report, host, "UNBANNED")
            assert web.get(url + "/").status_code == 200
            assert api.get(f"/abuse_reports/{report['id']}").json()["status"] == "PROCESSED"
    finally:
        a.stop()


def test_a_banned_tcp_address_closes_its_connections(srv: Server, token: str,
                                                     echo_port: int) -> None:
    a = agent(srv, token, {"kind": "tcp", "forward": f"tcp://127.0.0.1:{echo_port}"})
    url = a.urls[0]
    addr = url.removeprefix("tcp://")
    port = int(addr.rsplit(":", 1)[1])

    def echoes() -> bool:
        """Whether the address echoes; a connection refused, reset or closed: it does not
        (a banned address's connection is closed at once: with "ping" unread, a reset)."""
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(b"ping")
                return s.recv(10) == b"ping"
        except (ConnectionError, TimeoutError):
            return False

    try:
        with srv.client() as api:
            assert echoes()
            report = api.post("/abuse_reports", json={"urls": [url]}).json()
            assert report["hostnames"] == [{"hostname": addr, "status": "PENDING"}]
            decide(api, report, addr, "BANNED")
            until("the banned address closes", lambda: not echoes())

            async def bind_it() -> dict[str, Any]:
                raw = await Agent.connect(srv, token)
                try:
                    return await raw.bind_tcp(addr=addr)
                finally:
                    await raw.conn.close()

            reply = asyncio.run(bind_it())
            assert "taken down after the abuse report" in reply.get("Error", ""), reply
            decide(api, report, addr, "UNBANNED")
            until("the unbanned address echoes", echoes)
    finally:
        a.stop()


def client_hello(name: str) -> bytes:
    """The first flight of a TLS client for server name ``name``."""
    ctx = ssl.create_default_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname=name)
    with contextlib.suppress(ssl.SSLWantReadError):  # (it waits for the server's answer)
        tls.do_handshake()
    return outgoing.read()


def test_a_banned_tls_name_closes_its_connections(srv: Server, token: str,
                                                  echo_port: int) -> None:
    """A TLS tunnel (passed through to an echo service: what comes back is the client's own
    hello) is closed at the hello once its name is banned."""
    a = agent(srv, token, {"kind": "tls", "forward": f"tcp://127.0.0.1:{echo_port}"})
    url = a.urls[0]
    host = urlsplit(url).hostname or ""
    hello = client_hello(host)

    def echoed() -> bool:
        with socket.create_connection(("127.0.0.1", srv.https_port), timeout=10) as s:
            s.sendall(hello)
            got = b""
            try:
                while len(got) < len(hello) and (chunk := s.recv(65536)):
                    got += chunk
            except ConnectionResetError:  # (closed with the hello unread)
                return False
            return got == hello

    try:
        with srv.client() as api:
            assert echoed()
            report = api.post("/abuse_reports", json={"urls": [url]}).json()
            decide(api, report, host, "BANNED")
            until("the banned name closes", lambda: not echoed())
            decide(api, report, host, "IGNORE")  # (ignored: not banned)
            until("the name served again", echoed)
    finally:
        a.stop()
