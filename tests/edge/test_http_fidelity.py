"""HTTP/1.1 semantics through a tunnel bound by the official SDK, against a scripted upstream
that answers byte for byte what each path says (the responses a framework would not write):
HTTP/1.0 clients, HEAD, 204/304, 100 Continue, trailers, close-delimited and truncated bodies,
an upstream that closes, hop-by-hop headers, refused upgrades and malformed requests."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit

import h11
import pytest

from tests.edge.agents import agent, read_all
from tests.edge.upstream import accept_in_threads
from tests.server import Server

ANSWERS = {
    "/plain": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nKeep-Alive: timeout=5\r\n"
              b"Connection: keep-alive\r\n\r\nplain",
    "/chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n"
                b"5\r\nhello\r\n0\r\nX-Sum: 42\r\n\r\n",
    "/head": b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\nContent-Type: text/plain\r\n\r\n",
    "/nocontent": b"HTTP/1.1 204 No Content\r\n\r\n",
    "/notmodified": b'HTTP/1.1 304 Not Modified\r\nETag: "v1"\r\n\r\n',
    "/close": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
    "/eof": b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil-eof",
    "/truncated": b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort",
    "/refuse": b"HTTP/1.1 400 Bad Request\r\nContent-Length: 2\r\n\r\nno",
    "/early": b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"
              b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    "/conn-cl": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: Content-Length, "
                b"Transfer-Encoding\r\n\r\nhello",
    "/switch": b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n",
}
CLOSES = {"/close", "/eof", "/truncated", "/switch"}


class Scripted:
    """The upstream: each request's raw head is kept in ``heads``; each connection counted."""

    def __init__(self) -> None:
        self.heads: list[bytes] = []
        self.connections = 0
        self.lock = threading.Lock()

    def handle(self, conn: socket.socket) -> None:
        with self.lock:
            self.connections += 1
        buf = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in buf:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                head, buf = buf.split(b"\r\n\r\n", 1)
                with self.lock:
                    self.heads.append(head)
                lines = head.split(b"\r\n")
                path = lines[0].split()[1].decode()
                fields = {k.strip().lower(): v.strip() for k, _, v in
                          (line.partition(b":") for line in lines[1:])}
                if fields.get(b"expect") == b"100-continue":
                    conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                size = int(fields.get(b"content-length", b"0"))
                while len(buf) < size:
                    buf += conn.recv(65536)
                body, buf = buf[:size], buf[size:]
                if path == "/continue":
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%b"
                                 % (len(body), body))
                    continue
                conn.sendall(ANSWERS[path])
                if path in CLOSES:
                    return


@pytest.fixture(scope="module")
def scripted() -> Iterator[tuple[Scripted, int]]:
    upstream = Scripted()
    listener = socket.create_server(("127.0.0.1", 0))
    accept_in_threads(listener, upstream.handle)
    try:
        yield upstream, listener.getsockname()[1]
    finally:
        listener.close()


@pytest.fixture
def host(srv: Server, token: str, scripted: tuple[Scripted, int]) -> Iterator[str]:
    a = agent(srv, token, {"kind": "http", "forward": f"http://127.0.0.1:{scripted[1]}"})
    try:
        yield urlsplit(a.urls[0]).netloc
    finally:
        a.stop()


class Client:
    """Raw bytes to the public HTTP listener; responses read with h11 (an independent parser:
    wrong framing from the edge shows up as a misparse)."""

    def __init__(self, srv: Server, host: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", srv.http_port), timeout=20)
        self.host = host
        self.conn = h11.Connection(h11.CLIENT)

    def send(self, method: str, path: str, extra: str = "", body: bytes = b"") -> None:
        self.conn.send(h11.Request(method=method, target=path, headers=[("Host", self.host)]))
        self.sock.sendall(f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\n{extra}\r\n"
                          .encode() + body)

    def response(self) -> tuple[h11.Response, bytes, list[tuple[bytes, bytes]]]:
        self.conn.send(h11.EndOfMessage())
        resp, body = None, b""
        while True:
            event = self.conn.next_event()
            if event is h11.NEED_DATA:
                self.conn.receive_data(self.sock.recv(65536))
            elif isinstance(event, h11.Response):
                resp = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert resp is not None
                if self.conn.our_state is h11.DONE and self.conn.their_state is h11.DONE:
                    self.conn.start_next_cycle()
                return resp, body, list(event.headers)
            elif not isinstance(event, h11.InformationalResponse):
                raise AssertionError(f"unexpected {event}")

    def close(self) -> None:
        self.sock.close()


def headers_of(resp: h11.Response) -> dict[bytes, bytes]:
    return dict(resp.headers)


def test_head_bodiless_statuses_and_trailers_keep_one_connection(
        srv: Server, host: str) -> None:
    c = Client(srv, host)
    try:
        c.send("HEAD", "/head")
        resp, body, _ = c.response()
        assert resp.status_code == 200 and body == b""
        assert headers_of(resp)[b"content-length"] == b"1234"  # the GET's length, no body
        for path, status in (("/nocontent", 204), ("/notmodified", 304)):
            c.send("GET", path)
            resp, body, _ = c.response()
            assert (resp.status_code, body) == (status, b"")
        c.send("GET", "/chunked")
        resp, body, trailers = c.response()
        assert body == b"hello" and trailers == [(b"x-sum", b"42")]
        assert headers_of(resp)[b"transfer-encoding"] == b"chunked"
        c.send("GET", "/plain")
        resp, body, _ = c.response()
        assert body == b"plain"
    finally:
        c.close()


def test_hop_by_hop_headers_stay_on_their_hop(srv: Server, host: str,
                                              scripted: tuple[Scripted, int]) -> None:
    upstream, _ = scripted
    c = Client(srv, host)
    try:
        c.send("GET", "/plain", "Connection: keep-alive, X-Private\r\nX-Private: secret\r\n"
                                "Keep-Alive: timeout=9\r\nTE: trailers\r\nX-Kept: yes\r\n")
        resp, body, _ = c.response()
        assert body == b"plain"
        assert b"keep-alive" not in headers_of(resp)  # the upstream's hop, not the client's
        head = upstream.heads[-1].lower()
        assert b"x-kept: yes" in head and b"x-forwarded-for: 127.0.0.1" in head
        for hop in (b"x-private", b"keep-alive", b"te:", b"connection"):
            assert hop not in head, head
    finally:
        c.close()


def test_a_response_keeps_framing_its_connection_header_names(srv: Server, host: str) -> None:
    """An upstream's ``Connection: Content-Length`` does not strip the response's length:
    the client reads the body as framed and the connection carries the next request."""
    c = Client(srv, host)
    try:
        c.send("GET", "/conn-cl")
        resp, body, _ = c.response()
        assert body == b"hello" and (b"content-length", b"5") in resp.headers
        c.send("GET", "/plain")
        assert c.response()[1] == b"plain"
    finally:
        c.close()


def test_http10_client_gets_a_close_delimited_body(srv: Server, host: str) -> None:
    with socket.create_connection(("127.0.0.1", srv.http_port), timeout=20) as s:
        s.sendall(f"GET /chunked HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
        data = read_all(s)  # the edge closes: that is where the body ends
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    assert b"transfer-encoding" not in head.lower() and b"connection: close" in head.lower()
    assert body == b"hello"


def test_expect_100_continue_is_relayed(srv: Server, host: str) -> None:
    c = Client(srv, host)
    try:
        c.sock.sendall(f"POST /continue HTTP/1.1\r\nHost: {host}\r\nContent-Length: 5\r\n"
                       "Expect: 100-continue\r\n\r\n".encode())
        assert c.sock.recv(65536).startswith(b"HTTP/1.1 100 Continue\r\n")  # before the body
        c.sock.sendall(b"hello")
        c.conn.send(h11.Request(method="POST", target="/continue",
                                headers=[("Host", host), ("Content-Length", "5")]))
        c.conn.send(h11.Data(data=b"hello"))
        resp, body, _ = c.response()
        assert resp.status_code == 200 and body == b"hello"
    finally:
        c.close()


def test_an_upstream_that_closes_does_not_close_the_client(
        srv: Server, host: str, scripted: tuple[Scripted, int]) -> None:
    upstream, _ = scripted
    c = Client(srv, host)
    try:
        before = upstream.connections
        for path, want in (("/close", b"ok"), ("/eof", b"until-eof"), ("/plain", b"plain")):
            c.send("GET", path)
            resp, body, _ = c.response()
            assert (resp.status_code, body) == (200, want)
        assert upstream.connections - before == 3  # each close meant a new upstream connection
    finally:
        c.close()


def test_a_truncated_upstream_body_cuts_the_client(srv: Server, host: str) -> None:
    with socket.create_connection(("127.0.0.1", srv.http_port), timeout=20) as s:
        s.sendall(f"GET /truncated HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        data = read_all(s)
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"content-length: 100" in head.lower() and body == b"short"  # and then EOF


def test_a_refused_upgrade_leaves_the_connection_to_http(srv: Server, host: str) -> None:
    c = Client(srv, host)
    try:
        c.sock.sendall(f"GET /refuse HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
                       f"Connection: Upgrade\r\n\r\nGET /plain HTTP/1.1\r\nHost: {host}\r\n\r\n"
                       .encode())
        for want in ((400, b"no"), (200, b"plain")):
            c.conn.send(h11.Request(method="GET", target="/", headers=[("Host", host)]))
            resp, body, _ = c.response()
            assert (resp.status_code, body) == want
    finally:
        c.close()


@pytest.mark.parametrize(("extra", "status"), [
    ("Content-Length: 3\r\nTransfer-Encoding: chunked\r\n", 400),
    ("X-Big: " + "a" * 70000 + "\r\n", 431),
])
def test_malformed_requests_get_a_page_and_a_close(srv: Server, host: str, extra: str,
                                                   status: int) -> None:
    with socket.create_connection(("127.0.0.1", srv.http_port), timeout=20) as s:
        s.sendall(f"POST /plain HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n".encode())
        data = read_all(s)
    head = data.partition(b"\r\n\r\n")[0].lower()
    assert head.startswith(b"http/1.1 %d " % status)
    assert b"edgeway-error-code: err_edgeway_4000" in head and b"connection: close" in head


def test_interim_responses_reach_http11_clients_only(srv: Server, host: str) -> None:
    with socket.create_connection(("127.0.0.1", srv.http_port), timeout=20) as s:
        s.sendall(f"GET /early HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
                  .encode())
        data = read_all(s)
    assert data.startswith(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"
                           b"HTTP/1.1 200 OK\r\n") and data.endswith(b"\r\n\r\nok")
    with socket.create_connection(("127.0.0.1", srv.http_port), timeout=20) as s:
        s.sendall(f"GET /early HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
        data = read_all(s)
    assert data.startswith(b"HTTP/1.1 200 OK\r\n") and data.endswith(b"\r\n\r\nok")


@pytest.mark.parametrize(("request_line", "status", "code"), [
    ("GET /switch", 502, "4502"),  # a 101 nobody asked for
    ("CONNECT example.com:443", 405, "4005"),
])
def test_protocol_switches_nobody_may_use(srv: Server, host: str, request_line: str,
                                          status: int, code: str) -> None:
    with socket.create_connection(("127.0.0.1", srv.http_port), timeout=20) as s:
        s.sendall(f"{request_line} HTTP/1.1\r\nHost: {host}\r\n\r\nnot http".encode())
        data = read_all(s)  # answered, then closed
    head = data.partition(b"\r\n\r\n")[0].lower()
    assert head.startswith(b"http/1.1 %d " % status)
    assert f"edgeway-error-code: err_edgeway_{code}".encode() in head
    assert b"connection: close" in head
