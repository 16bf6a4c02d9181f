"""Agent streams under load, through the official SDK: the session survives thousands of public
connections (the SDK ends its session when the server has more than 512 streams open towards
it, counting those it is still finishing), idle kept-alive public connections hold no stream,
a burst larger than the budget waits instead of failing, a stream ends when its client goes,
and a kept-alive upstream that closed meanwhile is retried on a new stream.

These exercise the data path only, which does not depend on the store: one SQLite server.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterator

import pytest

from tests.edge import upstream
from tests.edge.agents import Agent, agent
from tests.server import Server


def sessions(srv: Server) -> list[str]:
    with srv.client() as api:
        return [s["id"] for s in api.get("/tunnel_sessions").json()["tunnel_sessions"]]


def session_starts(srv: Server) -> int:
    return sum(1 for line in srv.log().splitlines()
               if '"event":"agent_session_start"' in line)


async def fetch(port: int, host: str, path: str = "/x") -> bytes:
    """One request on a fresh connection: the status line (or the exception's name)."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
                     .encode())
        data = await asyncio.wait_for(reader.read(), 60)
        writer.close()
        return data.split(b"\r\n", 1)[0]
    except (OSError, TimeoutError) as exc:
        return type(exc).__name__.encode()


def tally(results: list[bytes]) -> dict[bytes, int]:
    out: dict[bytes, int] = {}
    for r in results:
        out[r] = out.get(r, 0) + 1
    return out


def test_2000_sequential_connections_through_one_sdk_session(
        one_srv: Server, sdk: tuple[Agent, str]) -> None:
    """Four times a session's 512 streams, one after the other: each stream is given back
    (the soak of 5,000 and more is ``bench/``'s)."""
    _, host = sdk
    before, starts = sessions(one_srv), session_starts(one_srv)

    async def main() -> list[bytes]:
        return [await fetch(one_srv.http_port, host) for _ in range(2000)]

    assert tally(asyncio.run(main())) == {b"HTTP/1.1 200 OK": 2000}
    assert sessions(one_srv) == before and session_starts(one_srv) == starts


def test_connections_in_waves_and_a_burst_of_1500(
        one_srv: Server, sdk: tuple[Agent, str]) -> None:
    """More public connections at once than an agent session has streams (a burst of 1,500
    against its 512, after two waves of 500): they wait their turn, none fails, and the SDK
    never reconnects. (The soak of many more is ``bench/``'s.)"""
    _, host = sdk
    before, starts = sessions(one_srv), session_starts(one_srv)

    async def main() -> list[bytes]:
        out: list[bytes] = []
        for _ in range(2):
            out += await asyncio.gather(*[fetch(one_srv.http_port, host) for _ in range(500)])
        out += await asyncio.gather(*[fetch(one_srv.http_port, host) for _ in range(1500)])
        return out

    assert tally(asyncio.run(main())) == {b"HTTP/1.1 200 OK": 2500}
    assert sessions(one_srv) == before and session_starts(one_srv) == starts


def test_idle_kept_alive_connections_hold_no_stream(one_srv: Server,
                                                    sdk: tuple[Agent, str]) -> None:
    """1,500 kept-alive public connections, each after one request, idle: more than a
    session's streams; fresh requests are still served, and each idle connection can carry
    another request."""
    _, host = sdk
    port = one_srv.http_port
    starts = session_starts(one_srv)

    Held = tuple[asyncio.StreamReader, asyncio.StreamWriter]

    async def hold() -> Held:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(f"GET /h HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            await asyncio.wait_for(reader.readuntil(b"svc /h"), 30)
        except BaseException:
            writer.close()
            raise
        return reader, writer

    async def main() -> tuple[dict[bytes, int], int]:
        held: list[Held] = []
        try:  # (every connection closed whatever fails: none left to a later test's loop)
            for _ in range(6):
                got = await asyncio.gather(*[hold() for _ in range(250)],
                                           return_exceptions=True)
                held += [g for g in got if not isinstance(g, BaseException)]
                failed = [g for g in got if isinstance(g, BaseException)]
                if failed:
                    raise AssertionError(f"{len(failed)} of 250 connections failed while "
                                         f"{len(held)} were held: {failed[0]!r}") from failed[0]
            fresh = await asyncio.gather(*[fetch(port, host) for _ in range(300)])
            again = 0
            for reader, writer in held[::50]:
                writer.write(f"GET /again HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
                await asyncio.wait_for(reader.readuntil(b"svc /again"), 30)
                again += 1
            return tally(fresh), again
        finally:
            for _, writer in held:
                writer.close()

    fresh, again = asyncio.run(main())
    assert fresh == {b"HTTP/1.1 200 OK": 300} and again == 30
    assert session_starts(one_srv) == starts


class Upstream:
    """A scripted HTTP upstream on a loopback port: ``answer(request, n)`` gives the bytes to
    send for the n-th request (from 1) of a connection (``b""``: none, keep waiting), or None
    to close it unanswered;
    ``ended`` counts connections whose client side ended (EOF or reset)."""

    def __init__(self, answer: Callable[[bytes, int], bytes | None]) -> None:
        self.answer = answer
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.requests: list[bytes] = []
        self.ended = 0
        self.lock = threading.Lock()
        upstream.accept_in_threads(self.listener, self.serve)

    def serve(self, conn: socket.socket) -> None:
        with conn:
            buf, n = b"", 0
            while True:
                try:
                    data = conn.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    with self.lock:
                        self.ended += 1
                    return
                buf += data
                while b"\r\n\r\n" in buf:
                    head, buf = buf.split(b"\r\n\r\n", 1)
                    n += 1
                    with self.lock:
                        self.requests.append(head)
                    out = self.answer(head, n)
                    if out is None:
                        return
                    if out:
                        conn.sendall(out)

    def close(self) -> None:
        self.listener.close()


def wait_for(condition: Callable[[], bool], seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


@pytest.fixture
def scripted(one_srv: Server) -> Iterator[Callable[[Callable[[bytes, int], bytes | None]],
                                                     tuple[Upstream, str]]]:
    made: list[tuple[Upstream, Agent]] = []

    def make(answer: Callable[[bytes, int], bytes | None]) -> tuple[Upstream, str]:
        up = Upstream(answer)
        with one_srv.client() as api:
            token = api.post("/credentials", json={}).json()["token"]
        a = agent(one_srv, token, {"kind": "http", "forward": f"http://127.0.0.1:{up.port}"})
        made.append((up, a))
        return up, a.urls[0].split("://", 1)[1]

    yield make
    for up, a in made:
        a.stop()
        up.close()


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


def test_a_stream_ends_when_its_client_goes(one_srv: Server, scripted: Callable[..., tuple[
        Upstream, str]]) -> None:
    """The client leaves while its request waits for an answer (and while uploading): the
    agent's connection to the local service ends too, not when the service times out."""
    up, host = scripted(lambda head, n: b"")
    with socket.create_connection(("127.0.0.1", one_srv.http_port)) as s:
        s.sendall(f"GET /hang HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        wait_for(lambda: len(up.requests) == 1)
    wait_for(lambda: up.ended == 1, 5)
    with socket.create_connection(("127.0.0.1", one_srv.http_port)) as s:
        s.sendall(f"POST /hang HTTP/1.1\r\nHost: {host}\r\nContent-Length: 100\r\n\r\n"
                  "half".encode())
        wait_for(lambda: len(up.requests) == 2)
    wait_for(lambda: up.ended == 2, 5)


def test_a_later_request_of_a_kept_alive_connection_is_watched_too(
        one_srv: Server, scripted: Callable[..., tuple[Upstream, str]]) -> None:
    """The watch on the client is one per public connection, its timer moved from request
    to request: answered requests before it, a request that waits is watched as a first one
    is, and its upstream ends when the client goes."""
    up, host = scripted(lambda head, n: OK if b"/fast" in head else b"")
    with socket.create_connection(("127.0.0.1", one_srv.http_port), timeout=30) as s:
        for _ in range(3):
            s.sendall(f"GET /fast HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            assert read_response(s)[0] == 200
        s.sendall(f"GET /hang HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        wait_for(lambda: len(up.requests) == 4)
        assert up.ended == 0
    wait_for(lambda: up.ended == 1, 5)


def test_a_kept_alive_upstream_that_closed_is_retried_for_safe_requests(
        one_srv: Server, scripted: Callable[..., tuple[Upstream, str]]) -> None:
    """The local service answers a connection's first request and closes it when a second
    one arrives (its idle timeout raced the request): a GET goes again on a new stream; a
    POST, which may have been acted on, gets a 502."""
    up, host = scripted(lambda head, n: OK if n == 1 else None)
    port = one_srv.http_port
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        for i, method in enumerate(["GET", "GET", "GET"]):
            s.sendall(f"{method} /{i} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            assert read_response(s)[0] == 200
    assert len(up.requests) == 5  # the 2nd and 3rd GETs each went twice
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(f"POST /p HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\n\r\n".encode())
        status, headers = read_response(s)
        assert status == 502 and headers.get("edgeway-error-code") == "ERR_EDGEWAY_4502"


def test_a_safe_request_retried_on_a_new_stream_keeps_its_connection_in_step(
        one_srv: Server, scripted: Callable[..., tuple[Upstream, str]]) -> None:
    """The agent's upstream closes without answering (as when the agent dies under a
    request): a GET goes again on new streams, and the client's next request, pipelined
    behind it, is answered after it (a retry once read it as the first one's end and closed
    the connection unanswered); a service that never answers gets a 502 after the retries."""
    failed: list[bytes] = []

    def answer(head: bytes, n: int) -> bytes | None:
        if b"/flaky" in head and not failed:
            failed.append(head)
            return None
        return None if b"/never" in head else OK
    up, host = scripted(answer)
    with socket.create_connection(("127.0.0.1", one_srv.http_port), timeout=30) as s:
        s.sendall(f"GET /flaky HTTP/1.1\r\nHost: {host}\r\n\r\n"
                  f"GET /next HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        assert read_response(s)[0] == 200
        assert read_response(s)[0] == 200
        s.sendall(f"GET /never HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        status, headers = read_response(s)
        assert status == 502 and headers.get("edgeway-error-code") == "ERR_EDGEWAY_4502"
    paths = [h.split(b" ")[1] for h in up.requests]
    assert paths[:3] == [b"/flaky", b"/flaky", b"/next"], paths
    # /never: a new stream per attempt (3), after the stream kept alive from /next when it
    # is still pooled
    assert paths[3:] in ([b"/never"] * 3, [b"/never"] * 4), paths


_LEFT: weakref.WeakKeyDictionary[socket.socket, bytes] = weakref.WeakKeyDictionary()


def read_response(s: socket.socket) -> tuple[int, dict[str, str]]:
    """Status and headers of one response (its body read by Content-Length). Bytes after it
    (the next, pipelined response, when both came in one read) are kept for the next call."""
    buf = _LEFT.pop(s, b"")
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        assert chunk, f"closed without an answer: {buf!r}"
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = s.recv(65536)
        assert chunk, f"closed mid-body: {rest!r}"
        rest += chunk
    _LEFT[s] = rest[length:]
    return int(lines[0].split()[1]), headers


@pytest.mark.parametrize("body", [b"fffffffffffffffffffffff\r\n", b"5\nhello\r\n0\r\n\r\n"],
                         ids=["size-overflow", "lf-only-chunk-line"])
def test_a_malformed_chunked_body_is_answered_at_once(
        one_srv: Server, scripted: Callable[..., tuple[Upstream, str]], body: bytes) -> None:
    """The head went upstream already when the body turns out malformed: the client gets a
    400 at once and the upstream's connection ends (it will not get a whole request)."""
    up, host = scripted(lambda head, n: b"")
    with socket.create_connection(("127.0.0.1", one_srv.http_port), timeout=30) as s:
        s.sendall(f"POST /up HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n"
                  .encode())
        wait_for(lambda: len(up.requests) == 1)
        t0 = time.monotonic()
        s.sendall(body + f"GET /next HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        status, headers = read_response(s)
        assert status == 400 and headers["edgeway-error-code"] == "ERR_EDGEWAY_4000"
        assert time.monotonic() - t0 < 5
    wait_for(lambda: up.ended == 1, 5)
