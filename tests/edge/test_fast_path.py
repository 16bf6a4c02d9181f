"""The HTTP path answered from the transport's callbacks (``edge/fast.py``) and its hand-over
to the full pipeline and back, on real sockets through the official SDK, as a hostile or
careless client drives it: requests of both kinds pipelined in one write (answered in order,
whichever side answers each), more pipelined than is read ahead, a download through a client
that reads slowly (every byte, in order, while its stream waits for it), and a malformed
request after good ones; a defect raised in a callback, which ends its connection alone.
(A client that goes while its answer is awaited: ``test_streams``.)
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import socket
from collections.abc import MutableMapping
from typing import Any
from urllib.parse import urlsplit

import h11
import pytest
import structlog.testing

from edgeway.edge.http import HttpEdge
from tests.edge.agents import Agent, agent
from tests.server import Server

Sdk = tuple[Agent, str]


def responses(sock: socket.socket, count: int, heads: frozenset[int] = frozenset()
              ) -> list[tuple[int, dict[bytes, bytes], bytes]]:
    """Read ``count`` responses (the ``heads``-th ones answer a HEAD) from ``sock``."""
    conn = h11.Connection(h11.CLIENT)
    out: list[tuple[int, dict[bytes, bytes], bytes]] = []
    status, headers, body = 0, dict[bytes, bytes](), bytearray()
    for i in range(count):
        # (h11 pairs each response with a request it sent: one per answer expected)
        conn.send(h11.Request(method="HEAD" if i in heads else "GET", target="/",
                              headers=[("Host", "x")]))
        conn.send(h11.EndOfMessage())
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = sock.recv(1 << 16)
                conn.receive_data(data)
                if not data:
                    raise AssertionError(f"closed after {len(out)} of {count} responses")
                continue
            if isinstance(event, h11.Response):
                status, headers, body = event.status_code, dict(event.headers), bytearray()
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                out.append((status, headers, bytes(body)))
                if i + 1 < count:
                    conn.start_next_cycle()
                break
    return out


def connect(srv: Server) -> socket.socket:
    return socket.create_connection(("127.0.0.1", srv.http_port), timeout=30)


def test_pipelined_requests_of_both_kinds_are_answered_in_order(one_srv: Server,
                                                                 sdk: Sdk) -> None:
    """Safe bodiless requests are answered from the callbacks, a POST with a body and an
    OPTIONS * by the full pipeline: sent in one write, each answer is its own, in order."""
    _, host = sdk
    body = b"z" * 70_000  # (more than a read: the pipeline reads it after the hand-over)
    wire = b"".join([
        f"GET /one HTTP/1.1\r\nHost: {host}\r\n\r\n".encode(),
        f"POST /headers HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len(body)}\r\n\r\n"
        .encode() + body,
        f"GET /two HTTP/1.1\r\nHost: {host}\r\n\r\n".encode(),
        f"HEAD /three HTTP/1.1\r\nHost: {host}\r\n\r\n".encode(),
        f"DELETE /four HTTP/1.1\r\nHost: {host}\r\n\r\n".encode(),
        f"GET /five HTTP/1.1\r\nHost: {host}\r\n\r\n".encode(),
    ])
    for _ in range(3):  # (the first round opens the streams the later ones reuse)
        with connect(one_srv) as sock:
            sock.sendall(wire)
            got = responses(sock, 6, heads=frozenset({3}))
        assert [status for status, _, _ in got] == [200] * 6
        assert got[0][2] == b"svc /one" and got[2][2] == b"svc /two"
        assert b'"body": 70000' in got[1][2] and \
            hashlib.sha256(body).hexdigest().encode() in got[1][2]
        assert got[3][2] == b""  # HEAD /three: its head alone
        assert got[4][2] == b"svc /four" and got[5][2] == b"svc /five"


def test_more_pipelined_requests_than_are_read_ahead(one_srv: Server, sdk: Sdk) -> None:
    """3,000 GETs in one write (about 150 kB, beyond what is read while one is answered):
    reading pauses and resumes, and every one is answered, in order."""
    _, host = sdk
    with connect(one_srv) as sock:
        sock.sendall(b"".join(f"GET /n{i} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
                              for i in range(3000)))
        got = responses(sock, 3000)
    assert [b for _, _, b in got] == [f"svc /n{i}".encode() for i in range(3000)]


def test_a_head_cut_where_reading_paused_is_read_on(one_srv: Server, sdk: Sdk) -> None:
    """Requests pipelined while a big answer is held up by its reader: reading pauses past
    the read-ahead, most likely inside a head. Once every complete one is answered, reading
    must resume for the rest of that head (once it stalled until the head's deadline and
    the connection was reset); the last head's end is sent only after every other answer."""
    _, host = sdk
    n, count = 32 << 20, 4000  # (about 200 kB of requests: past READ_AHEAD, in pieces)
    sock = connect(one_srv)
    sock.settimeout(20)
    with sock:
        sock.sendall(f"GET /bytes/{n} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        last = f"GET /last HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
        sock.sendall(b"".join(f"GET /p{i} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
                              for i in range(count)) + last[:20])
        conn = h11.Connection(h11.CLIENT)
        bodies: list[bytes] = []
        for i in range(count + 2):
            conn.send(h11.Request(method="GET", target="/", headers=[("Host", "x")]))
            conn.send(h11.EndOfMessage())
            if i == count + 1:
                sock.sendall(last[20:])  # (every other answer is in)
            body = bytearray()
            while not isinstance(event := conn.next_event(), h11.EndOfMessage):
                if event is h11.NEED_DATA:
                    data = sock.recv(1 << 16)
                    assert data, f"closed after {len(bodies)} answers"
                    conn.receive_data(data)
                elif isinstance(event, h11.Data):
                    body += event.data
            bodies.append(bytes(body))
            conn.start_next_cycle()
    assert len(bodies[0]) == n
    assert bodies[1:] == [f"svc /p{i}".encode() for i in range(count)] + [b"svc /last"]


# who answers a download: the callbacks (a bodiless GET), or the whole pipeline
# (``HttpEdge.serve``), which a request with a body always goes to
ANSWERED_BY = {"callbacks": "", "pipeline": "Content-Length: 1\r\n\r\nx"}


def download(host: str, n: int, by: str) -> bytes:
    """A pipelined ``/bytes/<n>`` then ``/after``, the first answered ``by`` either side."""
    extra = ANSWERED_BY[by]
    head_end = extra or "\r\n"
    return (f"GET /bytes/{n} HTTP/1.1\r\nHost: {host}\r\n{head_end}"
            f"GET /after HTTP/1.1\r\nHost: {host}\r\n\r\n").encode()


@pytest.mark.parametrize("by", ANSWERED_BY)
def test_a_download_through_a_slow_reader_arrives_whole(one_srv: Server, sdk: Sdk,
                                                         by: str) -> None:
    """32 MiB to a client with a 4 kB receive buffer reading 4 kB at a time, answered by
    either side: the client's transport pauses again and again (uvloop then keeps part of
    a write, exported, to send later), the stream waits meanwhile, and every byte arrives
    in order (the SHA-256 the service sent matches); then the connection carries another."""
    _, host = sdk
    n = 32 << 20
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(60)
    sock.connect(("127.0.0.1", one_srv.http_port))
    with sock:
        sock.sendall(download(host, n, by))
        conn = h11.Connection(h11.CLIENT)
        assert slow_download(conn, sock) == n
        rest = responses_after(conn, sock)
        assert rest == b"svc /after"


def slow_download(conn: h11.Connection, sock: socket.socket) -> int:
    """Read one ``/bytes/<n>`` answer from ``sock`` 4 kB at a time, its body checked against
    the SHA-256 the service sent: its size (``conn`` is ready for the next answer after)."""
    conn.send(h11.Request(method="GET", target="/", headers=[("Host", "x")]))
    conn.send(h11.EndOfMessage())
    digest, size, sha = hashlib.sha256(), 0, b""
    while not isinstance(event := conn.next_event(), h11.EndOfMessage):
        if event is h11.NEED_DATA:
            conn.receive_data(sock.recv(4096))
        elif isinstance(event, h11.Response):
            sha = dict(event.headers)[b"x-sha256"]
        elif isinstance(event, h11.Data):
            digest.update(event.data)
            size += len(event.data)
    assert digest.hexdigest().encode() == sha
    conn.start_next_cycle()
    return size


def responses_after(conn: h11.Connection, sock: socket.socket) -> bytes:
    conn.send(h11.Request(method="GET", target="/", headers=[("Host", "x")]))
    conn.send(h11.EndOfMessage())
    body = bytearray()
    while not isinstance(event := conn.next_event(), h11.EndOfMessage):
        if event is h11.NEED_DATA:
            conn.receive_data(sock.recv(1 << 16))
        elif isinstance(event, h11.Data):
            body += event.data
    return bytes(body)


def test_a_malformed_request_after_good_ones_gets_its_page(one_srv: Server, sdk: Sdk) -> None:
    """Two good GETs then a request with two Host headers, in one write: the two are
    answered, then a 400 that names the rule, and the connection closes."""
    _, host = sdk
    with connect(one_srv) as sock:
        sock.sendall(f"GET /a HTTP/1.1\r\nHost: {host}\r\n\r\n"
                     f"GET /b HTTP/1.1\r\nHost: {host}\r\n\r\n"
                     f"GET /c HTTP/1.1\r\nHost: {host}\r\nHost: other\r\n\r\n".encode())
        got = responses(sock, 3)
        assert [(s, b[:6]) for s, _, b in got[:2]] == [(200, b"svc /a"), (200, b"svc /b")]
        assert got[2][0] == 400 and b"exactly one Host header" in got[2][2]
        assert sock.recv(1) == b""


def test_a_defect_in_a_callback_ends_that_connection_alone() -> None:
    """A defect raised while a request is answered from the callbacks (here the router's)
    is logged and ends that connection, not the listener: the next connection is served
    (and meets the same defect)."""
    class Broken:
        def quick(self, *_args: object) -> None:
            raise RuntimeError("a defect")

    async def main() -> list[MutableMapping[str, Any]]:
        edge = HttpEdge(Broken(), "http")  # type: ignore[arg-type]

        async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await edge.run(reader, writer, ("127.0.0.1", 1))

        server = await asyncio.start_server(client, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            with structlog.testing.capture_logs() as logs:
                for _ in range(2):
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
                    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                    assert await asyncio.wait_for(reader.read(), 10) == b""
                    writer.close()
        return logs

    logs = asyncio.run(main())
    assert [e["event"] for e in logs] == ["http_fast_path_failed"] * 2


def _status(sock: socket.socket, host: str, auth: str = "") -> int:
    """One GET on ``sock`` (kept alive), with ``auth`` as its Authorization; its status."""
    line = f"Authorization: {auth}\r\n" if auth else ""
    sock.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\n{line}\r\n".encode())
    ((status, _, _),) = responses(sock, 1)
    return status


def test_a_remembered_route_asks_its_checks_of_every_request(one_srv: Server,
                                                             service: int) -> None:
    """The route a name's first request found is remembered, but what reads each request
    (an IP restriction, basic auth) is asked again of each: on one connection, then from
    an address the restriction refuses, after the route was remembered."""
    with one_srv.client() as api:
        token = api.post("/credentials", json={}).json()["token"]
    a = agent(one_srv, token, {"kind": "http", "forward": f"http://127.0.0.1:{service}",
                               "allow_cidrs": ["127.0.0.1/32"],
                               "basic_auth": ["alice", "correct-horse"]})
    try:
        host = urlsplit(a.urls[0]).netloc
        good = "Basic " + base64.b64encode(b"alice:correct-horse").decode()
        bad = "Basic " + base64.b64encode(b"alice:wrong-horse").decode()
        with connect(one_srv) as sock:
            assert [_status(sock, host, auth) for auth in (good, good, "", bad, good)] == \
                [200, 200, 401, 401, 200]
        with socket.socket() as other:
            other.settimeout(30)
            other.bind(("127.0.0.2", 0))  # (loopback too, outside 127.0.0.1/32)
            other.connect(("127.0.0.1", one_srv.http_port))
            assert _status(other, host, good) == 403
        with connect(one_srv) as sock:
            assert _status(sock, host, good) == 200
    finally:
        a.stop()
