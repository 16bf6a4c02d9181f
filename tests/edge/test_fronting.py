"""Domain fronting on the HTTPS listener: every request's Host must be the server name its
connection was made with (or, with none, a name the certificate covers), else 421 Misdirected
Request (ERR_EDGEWAY_4016) and the request reaches no tunnel: a wildcard certificate (a
reserved wildcard, the base domain's) does not let one name's connection reach another name.
Real TLS clients, the SDK agent, and upstream services that record what reaches them."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from tests.edge import upstream
from tests.edge.agents import agent, ca_context, parse_responses, read_all
from tests.server import Server, trust

A, B = "app.front-a.example.net", "x.front-b.example.net"
Seen = dict[str, list[str]]  # host -> the paths its upstream service received
GENERATED = "generated"  # in Seen: the paths the two generated names' service received


@pytest.fixture(scope="module")
def seen(srv: Server) -> Iterator[Seen]:
    """A tunnel for A (a certificate for that name only) and one for B (under a reserved
    wildcard), each to a service of its own."""
    with srv.client() as api:
        token = api.post("/credentials", json={}).json()["token"]
        for domain in (A, "*.front-b.example.net"):
            r = api.post("/reserved_domains", json={"domain": domain})
            assert r.status_code == 201, r.text
    paths: Seen = {A: [], B: [], GENERATED: []}
    with upstream.running("a", paths[A]) as port_a, upstream.running("b", paths[B]) as port_b, \
            upstream.running("g", paths[GENERATED]) as port_g:
        bound = agent(srv, token,
                      {"kind": "https", "domain": A, "forward": f"http://127.0.0.1:{port_a}"},
                      {"kind": "https", "domain": B, "forward": f"http://127.0.0.1:{port_b}"},
                      {"kind": "https", "forward": f"http://127.0.0.1:{port_g}"},
                      {"kind": "https", "forward": f"http://127.0.0.1:{port_g}"})
        try:
            assert all(not ln.get("error") for ln in bound.listeners), bound.listeners
            paths["names"] = [urlsplit(u).hostname or "" for u in bound.urls[2:]]
            yield paths
        finally:
            bound.stop()


def request(host: str, path: str = "/p", body: bytes = b"", close: bool = False) -> bytes:
    head = f"{'POST' if body else 'GET'} {path} HTTP/1.1\r\nHost: {host}\r\n"
    if body:
        head += f"Content-Length: {len(body)}\r\n"
    return (head + ("Connection: close\r\n" if close else "") + "\r\n").encode() + body


def exchange(srv: Server, sni: str | None, *requests: bytes) -> list[tuple[int, bytes]]:
    """``requests`` (the last one closing), pipelined on one TLS connection made with server
    name ``sni`` and offering h2 too; the answers."""
    ctx = ca_context(srv)
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    if sni is None or sni == "unknown.example.org":
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # what it gets is moot
    raw = socket.create_connection(("127.0.0.1", srv.https_port), timeout=30)
    with ctx.wrap_socket(raw, server_hostname=sni) as tls:
        assert tls.selected_alpn_protocol() == "http/1.1"  # HTTP/1.1 only: checked per request
        tls.sendall(b"".join(requests))
        return parse_responses(read_all(tls), len(requests))


def gets(srv: Server, sni: str | None, *hosts: str) -> list[tuple[int, bytes]]:
    """GET /p for each of ``hosts`` in turn on one connection made with ``sni``."""
    return exchange(srv, sni, *(request(h, close=i == len(hosts) - 1)
                                for i, h in enumerate(hosts)))


def misdirected(answer: tuple[int, bytes], host: str) -> bool:
    status, body = answer
    return status == 421 and b"ERR_EDGEWAY_4016" in body and host.encode() in body


def test_a_host_the_certificate_covers_is_served(srv: Server, seen: Seen) -> None:
    port = srv.https_port
    got = gets(srv, A, A, f"{A.upper()}:{port}", f"{A}.")
    assert got == [(200, b"a /p")] * 3
    assert gets(srv, B, B) == [(200, b"b /p")]


def test_another_host_on_the_connection_is_misdirected(srv: Server, seen: Seen) -> None:
    first, fronted, after = exchange(srv, A, request(A, "/first"), request(B, "/fronted-1"),
                                     request(A, "/after", close=True))
    assert first == (200, b"a /first") and after == (200, b"a /after")  # still usable
    assert misdirected(fronted, B) and A.encode() in fronted[1]  # names the certificate's
    # a request with a body: the body is read past, the next request is served
    fronted, after = exchange(srv, A, request(B, "/fronted-2", b"x" * 5000),
                              request(A, "/next", close=True))
    assert misdirected(fronted, B) and after == (200, b"a /next")
    (back,) = exchange(srv, B, request(A, "/fronted-3", close=True))
    assert misdirected(back, A)
    assert not [p for p in seen[A] + seen[B] if p.startswith("/fronted")]
    assert "/first" in seen[A] and "/after" in seen[A] and "/next" in seen[A]


def test_a_wildcard_certificate_carries_its_server_name_only(srv: Server, seen: Seen) -> None:
    # another name under the same wildcard: the certificate covers it, the connection is not
    # for it
    for host in ("y.front-b.example.net", "front-b.example.net",
                 "deep.x.front-b.example.net"):
        (answer,) = gets(srv, B, host)
        assert misdirected(answer, host), answer
    # the certificate for A's exact name covers nothing under it
    (answer,) = gets(srv, A, f"sub.{A}")
    assert misdirected(answer, f"sub.{A}"), answer


def test_one_generated_name_cannot_reach_another(srv: Server, seen: Seen) -> None:
    """Two tunnels under the base domain share its wildcard certificate: a connection made
    for one (which passed that name's checks) carries no request for the other."""
    one, other = seen["names"]
    assert gets(srv, one, one) == [(200, b"g /p")]
    for sni, host in ((one, other), (other, one)):
        (answer,) = exchange(srv, sni, request(host, "/fronted-5", close=True))
        assert misdirected(answer, host) and sni.encode() in answer[1], answer
    assert "/fronted-5" not in seen[GENERATED]


def test_no_server_name_reaches_no_tunnel(srv: Server, seen: Seen) -> None:
    """Such a connection gets the tunnel listener's certificate (localhost, 127.0.0.1,
    ::1): it carries requests for those names only, which no tunnel serves."""
    (answer,) = exchange(srv, None, request(A, "/fronted-4", close=True))
    assert misdirected(answer, A) and b"localhost" in answer[1]
    assert "/fronted-4" not in seen[A]
    for host in ("localhost", "127.0.0.1", "[::1]"):
        ((status, body),) = gets(srv, None, f"{host}:{srv.https_port}")
        assert status == 404 and b"ERR_EDGEWAY_4004" in body, (host, body)


def test_an_unknown_server_name_carries_that_name_only(srv: Server, seen: Seen) -> None:
    sni = "unknown.example.org"
    for host in (A, "localhost", "127.0.0.1"):
        (answer,) = exchange(srv, sni, request(host, "/fronted-6", close=True))
        assert misdirected(answer, host) and sni.encode() in answer[1], (host, answer)
    ((status, body),) = gets(srv, sni, sni)
    assert status == 404 and b"ERR_EDGEWAY_4004" in body, body
    assert "/fronted-6" not in seen[A]


def test_plain_http_is_not_affected(srv: Server, seen: Seen) -> None:
    r = httpx.get(f"http://127.0.0.1:{srv.http_port}/p", headers={"Host": A}, verify=trust())
    assert r.status_code == 308 and r.headers["location"].startswith(f"https://{A}:")
