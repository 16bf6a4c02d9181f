"""Connection limits over real sockets: the management API's request-head deadline, the cap
on one client address's connections on every listener, and the process's cap that keeps
descriptors for agents and the API. Clients take loopback addresses of their own
(127.0.0.x) to be told apart from the suite's own requests, which come from 127.0.0.1."""

from __future__ import annotations

import contextlib
import json
import resource
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api.test_api_restrictions import from_address
from tests.conftest import BACKENDS, backend_server
from tests.domains.resolver import udp_and_tcp_port
from tests.edge.agents import sdk_connect
from tests.server import Server

CAP = 4


def held(port: int, source: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
    sock.settimeout(5)
    return sock


def ending(sock: socket.socket, within: float) -> bytes | None:
    """What the server sent before it closed ``sock``, or None if it was open ``within``
    seconds on."""
    got = b""
    deadline = time.monotonic() + within
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            data = sock.recv(65536)
        except TimeoutError:
            return None
        except ConnectionResetError:
            return got
        if not data:
            return got
        got += data
    return None


def cap_lines(srv: Server, **want: object) -> list[dict[str, object]]:
    lines = [json.loads(line) for line in srv.log().splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("event") == "connection_cap_reached"
            and all(line.get(k) == v for k, v in want.items())]


# -- the API's head deadline ------------------------------------------------------------------

@pytest.fixture(scope="module", params=BACKENDS)
def quick(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[Server]:
    """A server whose API wants a request head within one second."""
    with backend_server(request.param, Path(tmp_path_factory.mktemp("quick")),
                        "--api-head-timeout", "1") as srv:
        yield srv


def test_the_api_closes_connections_whose_head_is_slow(quick: Server) -> None:
    port = int(quick.base_url.rsplit(":", 1)[1])
    silent = [held(port, f"127.0.0.{10 + i}") for i in range(3)]
    dripping = [held(port, f"127.0.0.{20 + i}") for i in range(3)]
    for sock in dripping:
        sock.sendall(b"GET /credentials HTTP/1.1\r\nHost: x\r\n")
    kept = held(port, "127.0.0.30")  # a first request answered, then a slow second head
    kept.sendall(b"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n")
    assert kept.recv(65536).startswith(b"HTTP/1.1 ")
    kept.sendall(b"GET /credentials HTTP/1.1\r\n")
    started = time.monotonic()
    open_ = {*silent, *dripping, kept}
    closed: dict[socket.socket, float] = {}
    while open_ and time.monotonic() - started < 10:
        for sock in list(open_):
            if sock in dripping or sock is kept:
                with contextlib.suppress(OSError):  # a header line every 0.2 s, never a head
                    sock.sendall(b"X-Slow: yes\r\n")
            if ending(sock, 0.2 / len(open_)) is not None:
                closed[sock] = time.monotonic() - started
                open_.discard(sock)
        with from_address(quick, "127.0.0.40") as api:  # the API answers meanwhile
            assert api.get("/credentials").status_code == 200
    assert not open_, f"{len(open_)} slow connections still open after 10 s"
    assert all(0.5 < seconds < 5 for seconds in closed.values()), closed
    for sock in closed:
        sock.close()


# -- the cap per client address ---------------------------------------------------------------

DNS_PORTS: dict[str, int] = {}  # of the capped servers, by API address


@pytest.fixture(scope="module", params=BACKENDS)
def capped(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Server]:
    dns = udp_and_tcp_port()
    with backend_server(request.param, Path(tmp_path_factory.mktemp("capped")),
                        "--max-connections-per-address", str(CAP),
                        "--dns-addr", f"127.0.0.1:{dns}", "--public-ip", "127.0.0.1") as srv:
        DNS_PORTS[srv.base_url] = dns
        yield srv


def _port(srv: Server, listener: str) -> int:
    return {"api": int(srv.base_url.rsplit(":", 1)[1]), "http": srv.http_port,
            "https": srv.https_port, "tunnel": srv.tunnel_port, "ssh": srv.ssh_port,
            "dns": DNS_PORTS.get(srv.base_url, 0)}[listener]


def _served(srv: Server, listener: str, source: str) -> bool:
    """A normal client from ``source`` is served (HTTP listeners: answered; the others:
    kept, or greeted by the SSH gateway)."""
    if listener == "api":
        with from_address(srv, source) as api:
            return api.get("/credentials").status_code == 200
    sock = held(_port(srv, listener), source)
    try:
        if listener == "http":
            sock.sendall(b"GET / HTTP/1.1\r\nHost: nothing.example\r\nConnection: close\r\n\r\n")
            answer = ending(sock, 5) or b""
            return answer.startswith(b"HTTP/1.1 ") and answer[9:12] not in (b"429", b"503")
        if listener == "ssh":
            return sock.recv(256).startswith(b"SSH-2.0-Edgeway")
        return ending(sock, 0.5) is None
    finally:
        sock.close()


@pytest.mark.parametrize("listener", ["api", "http", "https", "tunnel", "ssh", "dns"])
def test_connections_over_the_per_address_cap_are_refused(capped: Server,
                                                          listener: str) -> None:
    port = _port(capped, listener)
    flood = f"127.0.1.{10 + ['api', 'http', 'https', 'tunnel', 'ssh', 'dns'].index(listener)}"
    kept = [held(port, flood) for _ in range(CAP)]
    over = held(port, flood)
    answer = ending(over, 2)
    over.close()
    assert answer is not None, f"the connection over the cap on {listener} was kept"
    if listener == "api":
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 429") and b"Connection: close" in head
        assert json.loads(body)["error_code"] == "ERR_EDGEWAY_254"
    elif listener == "http":
        assert answer.startswith(b"HTTP/1.1 429")
    else:
        assert not answer.startswith(b"HTTP")
    assert _served(capped, listener, f"127.0.2.{10 + len(listener)}")  # other addresses: served
    for sock in kept:
        sock.close()
    deadline = time.monotonic() + 10  # the cap is freed as the connections end
    while not _served(capped, listener, flood):
        assert time.monotonic() < deadline, f"{listener}: the cap was not freed"
        time.sleep(0.1)


def test_a_flood_of_the_tunnel_listener_leaves_agents_in(capped: Server) -> None:
    """Another address's flood is capped (and logged with its figures) while an agent
    connects as usual."""
    flood = [held(capped.tunnel_port, "127.0.3.1") for _ in range(CAP + 20)]
    with capped.client() as api:
        token = api.post("/credentials", json={}).json()["token"]
    assert sdk_connect(capped, token).strip() == "connected"
    # a line at most every 10 s per listener and cap: this flood's address is in the next
    deadline = time.monotonic() + 20
    while not (lines := cap_lines(capped, listener="tunnel listener", address="127.0.3.1")):
        assert time.monotonic() < deadline, "no connection_cap_reached line"
        flood.append(held(capped.tunnel_port, "127.0.3.1"))
        time.sleep(0.5)
    line = lines[0]
    assert line["cap"] == "per_address" and line["limit"] == CAP
    assert line["descriptor_limit"] == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    refused = len(flood) - CAP
    assert len(cap_lines(capped, listener="tunnel listener")) <= 3 < refused, \
        "one line per interval, not one per connection"
    for sock in flood:
        sock.close()


# -- the process's cap, from its descriptor limit ---------------------------------------------

PUBLIC_CEILING = 24


@pytest.fixture(scope="module", params=BACKENDS)
def reserved(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[Server]:
    """A server whose public listeners may hold only PUBLIC_CEILING connections in all."""
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]  # (the server inherits it)
    with backend_server(request.param, Path(tmp_path_factory.mktemp("reserved")),
                        "--fd-reserve", str((limit - PUBLIC_CEILING) // 2)) as srv:
        yield srv


def test_public_listeners_stop_at_the_descriptor_limit_less_the_reserve(
        reserved: Server) -> None:
    flood = [held(reserved.http_port, f"127.0.4.{i % 8 + 1}") for i in range(PUBLIC_CEILING + 16)]
    try:
        answers: dict[socket.socket, bytes] = {}
        deadline = time.monotonic() + 5
        while len(answers) < 16 and time.monotonic() < deadline:
            for sock in set(flood) - set(answers):
                if (answer := ending(sock, 0.01)) is not None:
                    answers[sock] = answer
        refused = list(answers.values())
        assert len(refused) >= 16, refused
        # each refused connection is answered 503 and closed; on a loaded machine the close
        # may overtake the answer (a reset with nothing read), never another answer
        pages = [a for a in refused if a]
        assert len(pages) >= len(refused) // 2, refused
        assert all(a.startswith(b"HTTP/1.1 503") and b"Retry-After: 5" in a for a in pages), \
            pages
        with reserved.client() as api:  # the API keeps its reserve
            assert api.get("/credentials").status_code == 200
        assert cap_lines(reserved, listener="public HTTP listener", cap="total")
    finally:
        for sock in flood:
            sock.close()
