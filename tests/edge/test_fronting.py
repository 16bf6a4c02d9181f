"""Domain fronting on the HTTPS listener: every request's Host must be covered by the
certificate its connection was handshaken with, else 421 Misdirected Request
(ERR_EDGEWAY_4016) and the request reaches no tunnel. Real TLS clients, the SDK agent."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator

import httpx
import pytest

from tests.edge import upstream
from tests.edge.agents import Agent, agent, ca_context, parse_responses, read_all
from tests.server import Server

A, B = "app.front-a.example.net", "x.front-b.example.net"


@pytest.fixture(scope="module")
def tunnels(srv: Server) -> Iterator[Agent]:
    with srv.client() as api:
        token = api.post("/credentials", json={}).json()["token"]
        for domain in (A, "*.front-b.example.net"):
            r = api.post("/reserved_domains", json={"domain": domain})
            assert r.status_code == 201, r.text
    with upstream.running("a") as port_a, upstream.running("b") as port_b:
        bound = agent(srv, token,
                      {"kind": "https", "domain": A, "forward": f"http://127.0.0.1:{port_a}"},
                      {"kind": "https", "domain": B, "forward": f"http://127.0.0.1:{port_b}"})
        try:
            assert all(not ln.get("error") for ln in bound.listeners), bound.listeners
            yield bound
        finally:
            bound.stop()


def exchange(srv: Server, sni: str | None, *hosts: str) -> list[tuple[int, bytes]]:
    """Requests for ``hosts``, in order on one TLS connection made with ``sni``."""
    ctx = ca_context(srv)
    if sni is None or sni == "unknown.example.org":
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # what it gets is moot
    raw = socket.create_connection(("127.0.0.1", srv.https_port), timeout=30)
    with ctx.wrap_socket(raw, server_hostname=sni) as tls:
        wire = b"".join(
            f"GET /p HTTP/1.1\r\nHost: {h}\r\n"
            f"{'Connection: close' if i == len(hosts) - 1 else ''}\r\n\r\n".encode()
            for i, h in enumerate(hosts))
        tls.sendall(wire)
        return parse_responses(read_all(tls), len(hosts))


def test_a_host_the_certificate_covers_is_served(srv: Server, tunnels: Agent) -> None:
    port = srv.https_port
    got = exchange(srv, A, A, f"{A.upper()}:{port}", f"{A}.")
    assert got == [(200, b"a /p")] * 3
    assert exchange(srv, B, B) == [(200, b"b /p")]


def test_another_host_on_the_connection_is_misdirected(srv: Server, tunnels: Agent) -> None:
    (fronted, after) = exchange(srv, A, B, A)  # the connection stays usable after a 421
    assert fronted[0] == 421 and b"ERR_EDGEWAY_4016" in fronted[1] and b"b /p" not in fronted[1]
    assert B.encode() in fronted[1] and A.encode() in fronted[1]
    assert after == (200, b"a /p")
    (back,) = exchange(srv, B, A)
    assert back[0] == 421 and b"a /p" not in back[1]


def test_a_wildcard_certificate_covers_one_label(srv: Server, tunnels: Agent) -> None:
    # another name under the same wildcard is covered: the router answers (nothing bound)
    ((status, body),) = exchange(srv, B, "y.front-b.example.net")
    assert status == 404 and b"4016" not in body
    for host in ("front-b.example.net", "deep.x.front-b.example.net"):
        ((status, body),) = exchange(srv, B, host)
        assert status == 421 and b"ERR_EDGEWAY_4016" in body, host


@pytest.mark.parametrize("sni", [None, "unknown.example.org"])
def test_no_or_an_unknown_server_name_reaches_no_tunnel(srv: Server, tunnels: Agent,
                                                        sni: str | None) -> None:
    ((status, body),) = exchange(srv, sni, A)
    assert status == 421 and b"ERR_EDGEWAY_4016" in body and b"a /p" not in body


def test_plain_http_is_not_affected(srv: Server, tunnels: Agent) -> None:
    r = httpx.get(f"http://127.0.0.1:{srv.http_port}/p", headers={"Host": A})
    assert r.status_code in (200, 308), r.text  # https tunnels redirect plain HTTP
    assert r.status_code != 421
