"""Request smuggling through the edge, as a hostile client writes it, on both public listeners
(plain HTTP and HTTPS), through a tunnel bound by the official SDK whose upstream stream the
edge pools between clients: whatever one client sends must never become part of another
client's request upstream.

Each case sends an attacker's request whose body is the start of a second request, then a
victim's request on a connection of its own; the victim must get its own answer, and the
upstream must never see the attacker's inner request."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import pytest

from tests.edge import upstream
from tests.edge.agents import agent, parse_responses, raw_connection, read_all
from tests.server import Server

INNER = b"GET /poisoned-by-attacker HTTP/1.1\r\nX-Swallow: "  # the smuggled request's start
FRAMING = ("Content-Length", "Transfer-Encoding", "Host")
# every other header a Connection header may name: hop-by-hop ones and a private one
OTHERS = ("Keep-Alive", "TE", "Trailer", "Upgrade", "Proxy-Connection", "Connection",
          "X-Private")


@dataclass
class Site:
    urls: dict[str, str]  # scheme -> the tunnel's public URL
    seen: list[str]  # every path that reached the upstream


@pytest.fixture(scope="module")
def site(srv: Server) -> Iterator[Site]:
    with srv.client() as api:
        token = api.post("/credentials", json={}).json()["token"]
    seen: list[str] = []
    with upstream.running("svc", seen) as port:
        forward = f"http://127.0.0.1:{port}"
        bound = agent(srv, token, {"kind": "http", "forward": forward},
                      {"kind": "https", "forward": forward})
        try:
            urls = {urlsplit(u).scheme: u for u in bound.urls}
            assert set(urls) == {"http", "https"}, bound.listeners
            yield Site(urls, seen)
        finally:
            bound.stop()


def send(srv: Server, url: str, raw: bytes, answers: int = 1) -> list[tuple[int, bytes]]:
    """``raw`` on a connection of its own to ``url``'s listener; its ``answers`` answers."""
    with raw_connection(srv, url) as sock:
        sock.sendall(raw)
        return parse_responses(read_all(sock), answers)


def attack(host: str, connection: str) -> bytes:
    """A POST whose body is the start of another request, its ``Connection`` naming
    ``connection``, then (pipelined) a request that closes."""
    smuggled = (f"POST /attacker HTTP/1.1\r\nHost: {host}\r\nConnection: {connection}\r\n"
                f"Content-Length: {len(INNER)}\r\n\r\n").encode() + INNER
    return smuggled + f"GET /after HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n" \
        .encode()


def victim(srv: Server, url: str) -> tuple[str, list[list[str]]]:
    """A second client's request with its cookie: the path and headers the upstream says it
    received."""
    host = urlsplit(url).netloc
    ((status, body),) = send(srv, url, (f"GET /headers?victim=1 HTTP/1.1\r\nHost: {host}\r\n"
                                        "Cookie: session=victim\r\nConnection: close\r\n\r\n")
                             .encode())
    assert status == 200, body
    got = json.loads(body)
    return got["path"], got["headers"]


@pytest.mark.parametrize("scheme", ["http", "https"])
@pytest.mark.parametrize("named", [*FRAMING, "content-LENGTH", "close, Content-Length",
                                   "Keep-Alive,Host"])
def test_a_framing_header_named_in_connection_is_refused(srv: Server, site: Site, scheme: str,
                                                         named: str) -> None:
    url = site.urls[scheme]
    answers = send(srv, url, attack(urlsplit(url).netloc, named))
    assert answers[0][0] == 400 and b"ERR_EDGEWAY_4000" in answers[0][1], answers
    assert b"cannot be hop-by-hop" in answers[0][1]
    path, headers = victim(srv, url)
    assert path == "/headers" and ["cookie", "session=victim"] in headers
    assert "/poisoned-by-attacker" not in site.seen and "/attacker" not in site.seen


@pytest.mark.parametrize("scheme", ["http", "https"])
@pytest.mark.parametrize("named", OTHERS)
def test_other_named_headers_leave_the_framing_whole(srv: Server, site: Site, scheme: str,
                                                     named: str) -> None:
    """The named header is dropped; the body arrives whole, as the body, and the next
    request (pipelined, then another client's on the pooled upstream) arrives intact."""
    url = site.urls[scheme]
    host = urlsplit(url).netloc
    raw = (f"POST /headers HTTP/1.1\r\nHost: {host}\r\nConnection: {named}\r\n"
           f"Content-Length: {len(INNER)}\r\n\r\n").encode() + INNER
    raw += f"GET /after HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
    first, after = send(srv, url, raw, 2)
    assert first[0] == 200 and after == (200, b"svc /after"), (first, after)
    echoed = json.loads(first[1])
    assert echoed["body"] == len(INNER) and echoed["method"] == "POST"
    assert ["content-length", str(len(INNER))] in echoed["headers"]
    assert not [k for k, _ in echoed["headers"] if k == named.lower() != "connection"]
    path, headers = victim(srv, url)
    assert path == "/headers" and ["cookie", "session=victim"] in headers
    assert "/poisoned-by-attacker" not in site.seen


@pytest.mark.parametrize("form", ["http://{b}/headers?x=1", "HTTP://{b}", "http://{b}?x=1"])
def test_an_absolute_form_target_is_routed_by_its_authority(srv: Server, site: Site,
                                                            form: str) -> None:
    """RFC 9112 §3.2.2: the authority of an absolute-form target is the request's host (the
    Host header is ignored), and the upstream gets the origin form."""
    b = urlsplit(site.urls["http"]).netloc
    target = form.format(b=b)
    ((status, body),) = send(srv, site.urls["http"], (
        f"GET {target} HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n").encode())
    assert status == 200, body
    path = urlsplit(target).path or "/"
    assert body.startswith(b"{") or body == f"svc {path}".encode(), body
    if body.startswith(b"{"):
        echoed = json.loads(body)
        assert ["host", b] in echoed["headers"] and echoed["path"] == "/headers"
        assert not [v for k, v in echoed["headers"] if k == "host" and v == "a.example"]


def test_an_absolute_form_target_for_another_host_is_misdirected_on_https(
        srv: Server, site: Site) -> None:
    """On HTTPS the authority must be the connection's server name, like a Host header."""
    own = urlsplit(site.urls["https"]).netloc
    other = urlsplit(site.urls["http"]).netloc
    ((status, body),) = send(srv, site.urls["https"], (
        f"GET http://{other}/fronted HTTP/1.1\r\nHost: {own}\r\nConnection: close\r\n\r\n"
    ).encode())
    assert status == 421 and b"ERR_EDGEWAY_4016" in body, body
    assert "/fronted" not in site.seen


@pytest.mark.parametrize("target", ["ftp://x.example/", "http:///nohost", "http://u@x.example/"])
def test_an_unusable_absolute_form_target_is_refused(srv: Server, site: Site,
                                                     target: str) -> None:
    host = urlsplit(site.urls["http"]).netloc
    with socket.create_connection(("127.0.0.1", srv.http_port), timeout=30) as sock:
        sock.sendall(f"GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        data = read_all(sock)
    assert data.startswith(b"HTTP/1.1 400 ") and b"absolute-form" in data, data[:300]
