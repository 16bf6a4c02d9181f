"""Request inspection: the tap on scripted byte streams (keep-alive, pipelining, chunked,
HEAD, interim responses, upgrades, garbage, the body cap), the store's eviction, and the
agent end to end: captures through the public URL, the local API's filters, replay and
clearing, a tunnel with ``inspect: false``, and ``inspect_db_size: -1``."""

from __future__ import annotations

import base64
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from edgeway.agent import heads
from edgeway.agent.captures import BODY_CAP, OVERHEAD, Exchange, Message, Store
from edgeway.agent.configcheck import DEFAULT_INSPECT_DB_SIZE
from edgeway.agent.heads import (
    REMEMBERED_MAX,
    STATUS_LINES,
    framing_headers,
    request_line,
    status_line,
    text,
)
from edgeway.agent.inspect import Tap
from tests.edge.agents import EdgeClient
from tests.server import Server, free_port
from tests.stub_http import StubHandler, serving

if TYPE_CHECKING:
    from tests.agent.test_agent import Agent

GET = b"GET /a?x=1 HTTP/1.1\r\nHost: h\r\nuser-agent: t\r\nX-Two: 1\r\nx-two: 2\r\n\r\n"
OK = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\nContent-Length: 5\r\n\r\nhello"
POST = b"POST /b HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc"
GONE = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
CHUNKED = (b"POST /up HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n")
CHUNKED_OK = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
WS = b"GET /ws HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"


def pieces(data: bytes, rng: random.Random | None) -> list[bytes]:
    """``data`` whole (rng None), or cut at random places (single bytes included)."""
    if rng is None:
        return [data]
    cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(1, 12))))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


def play(script: list[tuple[str, bytes]], rng: random.Random | None = None
         ) -> tuple[Tap, list[dict[str, Any]]]:
    """Feed ``(">", client bytes)`` / ``("<", service bytes)``; the captures, oldest first."""
    tap = Tap(Store(0), "web", "203.0.113.7:4321")
    for way, data in script:
        for piece in pieces(data, rng):
            (tap.request if way == ">" else tap.response)(piece)
    return tap, [ex.json() for ex in reversed(stored(tap).newest(100))]


def stored(tap: Tap) -> Store:
    assert tap.store is not None
    return tap.store


def raw(part: dict[str, Any]) -> bytes:
    return base64.b64decode(part["raw"])


@pytest.mark.parametrize("seed", [None, *range(40)])
def test_keep_alive_and_pipelined_exchanges_match_in_order(seed: int | None) -> None:
    rng = None if seed is None else random.Random(seed)
    for script in ([(">", GET), ("<", OK), (">", POST), ("<", GONE)],  # keep-alive
                   [(">", GET + POST), ("<", OK + GONE)]):  # pipelined
        tap, got = play(script, rng)
        assert [raw(c["request"]) for c in got] == [GET, POST]
        assert [raw(c["response"]) for c in got] == [OK, GONE]
        first, second = got
        assert (first["request"]["method"], first["request"]["uri"]) == ("GET", "/a?x=1")
        assert first["request"]["headers"] == {"Host": ["h"], "User-Agent": ["t"],
                                               "X-Two": ["1", "2"]}
        assert first["request"]["proto"] == "HTTP/1.1" and first["response"]["proto"] == \
            "HTTP/1.1"
        assert (first["response"]["status"], first["response"]["status_code"]) == ("200 OK",
                                                                                    200)
        assert first["response"]["headers"]["Content-Type"] == ["text/plain"]
        assert (second["request"]["method"], second["response"]["status"]) == (
            "POST", "404 Not Found")
        assert first["tunnel_name"] == "web" and first["remote_addr"] == "203.0.113.7:4321"
        assert first["duration"] > 0 and not tap.stopped
        assert datetime.fromisoformat(first["start"]).tzinfo is not None


@pytest.mark.parametrize("seed", [None, *range(40)])
def test_chunked_bodies_and_what_follows_them(seed: int | None) -> None:
    rng = None if seed is None else random.Random(seed)
    tap, got = play([(">", CHUNKED + GET), ("<", CHUNKED_OK + OK)], rng)
    assert [raw(c["request"]) for c in got] == [CHUNKED, GET]
    assert [raw(c["response"]) for c in got] == [CHUNKED_OK, OK]
    assert "X-Trailer" not in got[0]["request"]["headers"]  # a trailer, not a header
    assert not tap.stopped


def test_pending_exchanges_have_no_response_yet() -> None:
    tap, got = play([(">", GET + POST[:-1])])
    assert [c["response"] for c in got] == [None, None]
    assert raw(got[1]["request"]) == POST[:-1]
    tap.response(OK)
    assert stored(tap).newest(2)[1].response is not None
    assert stored(tap).newest(2)[0].response is None


def test_head_responses_interim_responses_and_bodies_until_close() -> None:
    head = b"HEAD /h HTTP/1.1\r\nHost: h\r\n\r\n"
    head_ok = b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n"  # no body follows
    same = b"HTTP/1.1 304 Not Modified\r\nContent-Length: 1234\r\n\r\n"  # nor here
    expect = b"PUT /p HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"
    created = b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n"
    until_close = b"HTTP/1.0 200 OK\r\n\r\nstreamed until the end"
    tap, got = play([(">", head), ("<", head_ok), (">", GET), ("<", same), (">", expect),
                     ("<", b"HTTP/1.1 100 Continue\r\n\r\n"), (">", b"hi"), ("<", created),
                     (">", GET), ("<", until_close)])
    assert [raw(c["response"]) for c in got[:3]] == [head_ok, same, created]
    assert raw(got[2]["request"]) == expect + b"hi"
    assert got[3]["response"] is None  # the close has not come yet
    tap.response_eof()
    last = stored(tap).newest(1)[0].json()["response"]
    assert raw(last) == until_close and last["proto"] == "HTTP/1.0"


def test_capture_stops_after_an_upgrade_and_resumes_after_a_refused_one() -> None:
    switching = b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n\r\n"
    for script in ([(">", WS), ("<", switching)],
                   [(">", WS), ("<", switching + b"\x81\x05hello"), (">", b"\x81\x85abcd")],
                   [(">", WS + GET), ("<", switching + OK)]):  # past a 101 nothing is HTTP
        tap, got = play(script)
        assert len(got) == 1 and got[0]["response"]["status_code"] == 101
        assert raw(got[0]["response"]) == switching and tap.stopped
    connect = b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"
    established = b"HTTP/1.1 200 Connection Established\r\n\r\n"
    tap, got = play([(">", connect + GET), ("<", established + OK)])
    assert len(got) == 1 and raw(got[0]["response"]) == established and tap.stopped
    refused = b"HTTP/1.1 426 Upgrade Required\r\nContent-Length: 0\r\n\r\n"
    tap, got = play([(">", WS + GET), ("<", refused + OK)])  # GET held, then parsed
    assert [c["response"]["status_code"] for c in got] == [426, 200]
    assert raw(got[1]["request"]) == GET and not tap.stopped


@pytest.mark.parametrize("script", [
    [(">", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(40))],  # a TLS hello
    [("<", OK)],  # an answer to nothing
    [(">", b"GET / HTTP/1.1\r\n" + b"X-Long: " + b"a" * 70000)],  # a head without end
    [(">", b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")],
    [(">", b"POST / HTTP/1.1\r\nContent-Length: 1, 2\r\n\r\n")],
    [(">", WS + bytes(70_000))],  # too much before the upgrade is answered
])
def test_garbage_stops_the_capture_quietly(script: list[tuple[str, bytes]]) -> None:
    tap, got = play(script)
    assert tap.stopped and all(c["response"] is None for c in got)
    light = Tap(None, "web", "203.0.113.7:4321")  # (its own reading of the heads)
    for way, data in script:
        (light.request if way == ">" else light.response)(data)
    assert light.stopped


@pytest.mark.parametrize("line", [
    b"\x16\x03\x01\x02\x00\x01\r\n", b"GET /a b HTTP/1.1\r\n", b"GET / HTTP/2.0\r\n",
    b"G(T / HTTP/1.1\r\n", b"GET  HTTP/1.1\r\n", b"GET /\x00 HTTP/1.1\r\n"])
def test_without_captures_a_start_line_that_is_not_http_stops_the_tap_by_its_end(
        line: bytes) -> None:
    """The light mode reads start lines itself: what is not an HTTP/1.x request line stops
    the tap by the end of that line (a byte that no method has, at once), its head not yet
    complete (not 64 KiB later). Its first bytes were forwarded all the same."""
    light = Tap(None, "web", "203.0.113.7:4321")
    for byte in line:
        light.request(bytes([byte]))
    assert light.stopped
    fine = Tap(None, "web", "203.0.113.7:4321")
    for byte in b"GET /a HTTP/1.1\r\nHost: h\r\n":
        fine.request(bytes([byte]))
    assert not fine.stopped


def test_without_captures_a_long_head_a_byte_at_a_time_is_framed() -> None:
    """A 39 kB head (a long target, many headers) sent one byte at a time, then its body,
    then another request: both exchanges are seen, the first with its whole target."""
    target = b"/" + b"t" * 20_000
    head = (b"POST " + target + b" HTTP/1.1\r\nHost: h\r\n" + b"X-Pad: pad\r\n" * 1600
            + b"Content-Length: 4\r\n\r\n")
    done: list[Exchange] = []
    light = Tap(None, "web", "203.0.113.7:4321", done=done.append)
    for byte in head:
        light.request(bytes([byte]))
    light.request(b"body" + GET)
    light.response(GONE + OK)
    assert not light.stopped and len(head) > 39_000
    assert [(ex.request.method, ex.request.uri, ex.response and ex.response.status_code)
            for ex in done] == [("POST", target.decode(), 404), ("GET", "/a?x=1", 200)]
    assert done[0].request.body == 4


def test_without_captures_status_lines_and_request_lines_are_read_as_llhttp_reads_them(
        ) -> None:
    """A reason with spaces, or none; HTTP/1.0; a method that is a token but not a known
    one; a target in absolute form: the light mode and the capturing one agree."""
    script = [(">", b"PURGE http://h/x?y HTTP/1.0\r\nContent-Length: 0\r\n\r\n"),
              ("<", b"HTTP/1.0 299 It went  well\r\nContent-Length: 2\r\n\r\nok"),
              (">", b"GET / HTTP/1.1\r\n\r\n"), ("<", b"HTTP/1.1 204\r\n\r\n")]
    done: list[Exchange] = []
    light = Tap(None, "web", "203.0.113.7:4321", done=done.append)
    for way, data in script:
        (light.request if way == ">" else light.response)(data)
    _, captured = play(script)
    assert not light.stopped and len(done) == len(captured) == 2
    for ex, c in zip(done, captured, strict=True):
        assert ex.response is not None
        assert (ex.request.method, ex.request.uri, ex.request.proto) == (
            c["request"]["method"], c["request"]["uri"], c["request"]["proto"])
        assert (ex.response.status_code, ex.response.proto) == (
            c["response"]["status_code"], c["response"]["proto"])
    assert [ex.response.reason for ex in done if ex.response] == ["It went  well", ""]


def test_remembered_status_lines_stay_bounded_and_read_the_same() -> None:
    """Status lines are remembered (a service repeats few): the memory is bounded, whatever
    a service sends, and a line read from it is the line read afresh (a bad one too)."""
    lines = [f"HTTP/1.1 {200 + n % 300} Reason {n}\r\n".encode() for n in range(3 * STATUS_LINES)]
    lines += [b"HTTP/1.1 200 OK\x01\r\n", b"HTTP/2 200 OK\r\n"]
    first = [status_line(text(line + b"X: y\r\n\r\n")) for line in lines]
    assert len(heads._status_lines) <= STATUS_LINES
    again = [status_line(text(line + b"\r\n")) for line in lines]
    assert first == again and first[-2:] == [None, None]
    assert first[0] == ("HTTP/1.1", 200, "Reason 0")


def test_remembered_request_lines_stay_bounded_and_read_the_same() -> None:
    """Request lines are remembered too (clients repeat theirs), within the same bounds: no
    more than ``STATUS_LINES`` of them, none longer than ``REMEMBERED_MAX``; a line read
    from memory is the line read afresh, a bad one and a long one too."""
    lines = [f"GET /{n}?q={'x' * (n % 7)} HTTP/1.{n % 2}\r\n".encode()
             for n in range(3 * STATUS_LINES)]
    long = b"GET /" + b"a" * REMEMBERED_MAX + b" HTTP/1.1\r\n"
    lines += [b"GET /a b HTTP/1.1\r\n", b"GET / HTTP/2\r\n", b"G\x00T / HTTP/1.1\r\n", long]
    first = [request_line(text(line + b"Host: h\r\n\r\n")) for line in lines]
    assert len(heads._request_lines) <= STATUS_LINES
    assert all(len(line) <= REMEMBERED_MAX for line in heads._request_lines)
    again = [request_line(text(line + b"\r\n")) for line in lines]
    assert first == again and first[-4:-1] == [None, None, None]
    assert first[0] == ("GET", "/0?q=", "HTTP/1.0")
    assert first[-1] == ("GET", "/" + "a" * REMEMBERED_MAX, "HTTP/1.1")
    assert request_line(text(bytes(range(0x80, 0x100)).join([b"GET /", b" HTTP/1.1\r\n"]))
                        ) == ("GET", "/" + bytes(range(0x80, 0x100)).decode("latin-1"),
                              "HTTP/1.1")


def test_garbage_after_an_exchange_keeps_it() -> None:
    tap, got = play([(">", GET), ("<", OK), (">", b"NOT HTTP\x00\r\n\r\n"), (">", POST)])
    assert tap.stopped and len(got) == 1 and raw(got[0]["response"]) == OK


def test_bodies_are_kept_up_to_the_cap() -> None:
    body = random.Random(1).randbytes(100_000)
    head = b"POST /big HTTP/1.1\r\nHost: h\r\nContent-Length: 100000\r\n\r\n"
    tap, got = play([(">", head + body), ("<", GONE), (">", GET)])
    assert not tap.stopped
    assert raw(got[0]["request"]) == head + body[:BODY_CAP]
    assert got[0]["request"]["truncated"] and not got[0]["response"]["truncated"]
    assert raw(got[1]["request"]) == GET  # the count went on past the cap


HEAD_ = b"HEAD /h HTTP/1.1\r\nHost: h\r\n\r\n"
HEAD_OK = b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n"  # no body follows


@pytest.mark.parametrize("seed", [None, *range(20)])
def test_without_captures_the_tap_frames_the_same_and_keeps_no_bytes(seed: int | None) -> None:
    """Inspection off (no store, no Host rewrite): the tap only frames exchanges for the
    request metrics and the console. It keeps no raw bytes and no header but the framing
    ones, and sees the same exchanges, in order, as with captures."""
    script = [(">", CHUNKED + GET + POST), ("<", CHUNKED_OK + OK + GONE), (">", HEAD_),
              ("<", HEAD_OK), (">", WS + GET), ("<", b"HTTP/1.1 426 No\r\nContent-Length:"
                                                    b" 0\r\n\r\n" + OK)]
    rng = None if seed is None else random.Random(seed)
    done: list[Exchange] = []
    light = Tap(None, "web", "203.0.113.7:4321", done=done.append)
    for way, data in script:
        for piece in pieces(data, rng):
            (light.request if way == ">" else light.response)(piece)
    _, captured = play(script)
    assert not light.stopped
    seen = [(ex.request.method, ex.request.uri, ex.response.status_code if ex.response else 0)
            for ex in done]
    assert seen == [(c["request"]["method"], c["request"]["uri"],
                     c["response"]["status_code"]) for c in captured]
    assert seen[:4] == [("POST", "/up", 200), ("GET", "/a?x=1", 200), ("POST", "/b", 404),
                        ("HEAD", "/h", 200)]
    assert all(not ex.request.raw and ex.response is not None and not ex.response.raw
               for ex in done)
    response = done[1].response
    assert response is not None and set(response.headers) == {"Content-Length"}
    assert set(done[1].request.headers) == set()
    assert done[-2].request.headers == {"Connection": ["Upgrade"], "Upgrade": ["websocket"]}


def test_a_sides_parser_goes_on_to_the_next_message() -> None:
    """A side's llhttp parser sees each message whole and goes on to the next (one made per
    message cost a tenth of the agent's CPU); a fresh one follows a message it did not see
    end (the answer to a HEAD: llhttp waits for its body). Without captures there is none."""
    light = Tap(Store(0), "web", "203.0.113.7:4321")
    requests: list[object] = []
    responses: list[object] = []
    for way, data in [(">", GET), ("<", OK), (">", POST), ("<", GONE), (">", CHUNKED),
                      ("<", CHUNKED_OK), (">", HEAD_), ("<", HEAD_OK), (">", GET), ("<", OK)]:
        side = light.requests if way == ">" else light.responses
        (light.request if way == ">" else light.response)(data)
        (requests if way == ">" else responses).append(side.parser)
    assert not light.stopped
    assert all(p is requests[0] for p in requests)
    assert all(p is responses[0] for p in responses[:4]) and responses[4] is not responses[3]
    assert requests[0] is not None and responses[4] is not None
    bare = Tap(None, "web", "203.0.113.7:4321")
    assert bare.requests.parser is None and bare.responses.parser is None


@pytest.mark.parametrize("captures", [False, True])
@pytest.mark.parametrize("seed", [None, *range(10)])
def test_a_request_after_connection_close_is_still_seen(seed: int | None,
                                                        captures: bool) -> None:
    """llhttp takes bytes after a ``Connection: close`` message for an error: a parser that
    went on from it gives way to a fresh one, and the next request is seen (its head whole
    or in pieces, its headers once)."""
    close = b"GET /last HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"
    script = [(">", close + GET), ("<", OK + OK)]
    rng = None if seed is None else random.Random(seed)
    done: list[Exchange] = []
    light = Tap(Store(0) if captures else None, "web", "203.0.113.7:4321", done=done.append)
    for way, data in script:
        for piece in pieces(data, rng):
            (light.request if way == ">" else light.response)(piece)
    assert not light.stopped
    assert [(ex.request.method, ex.request.uri) for ex in done] == [
        ("GET", "/last"), ("GET", "/a?x=1")]
    if captures:
        assert done[1].request.headers["X-Two"] == ["1", "2"]
        assert done[1].request.raw == GET


def test_the_framing_headers_of_a_head_are_found_whatever_their_case() -> None:
    head = (b"HTTP/1.1 200 OK\r\ncontent-LENGTH:5\r\nX-Upgrade: no\r\n"
            b"Upgrade-Insecure-Requests: 1\r\nConnection: \t keep-alive, Upgrade \t\r\n"
            b"Content-Length:  5 \r\nUPGRADE: h2c\r\nTransfer-Encoding:\r\n\r\n")
    assert framing_headers(text(head)) == {
        "Content-Length": ["5", "5"], "Connection": ["keep-alive, Upgrade"],
        "Upgrade": ["h2c"], "Transfer-Encoding": [""]}
    assert framing_headers(text(b"GET / HTTP/1.1\r\nHost: connection\r\n\r\n")) == {}


def exchange(size: int, tunnel: str = "t") -> Exchange:
    return Exchange(tunnel, "", Message(bytearray(size)))


def test_the_store_evicts_the_oldest_by_bytes_and_count() -> None:
    assert Store(0).max_bytes == DEFAULT_INSPECT_DB_SIZE
    store = Store(3 * (OVERHEAD + 100))
    first, second, third, fourth = (exchange(100) for _ in range(4))
    for ex in (first, second, third):
        store.add(ex)
    assert store.newest(10) == [third, second, first] and store.size == 3 * (OVERHEAD + 100)
    store.add(fourth)
    assert store.newest(10) == [fourth, third, second] and store.get(first.id) is None
    third.response = Message(bytearray(700))  # past the budget: the oldest go until it fits
    store.resize(third)
    assert store.newest(10) == [fourth] and store.size == OVERHEAD + 100
    store.resize(first)  # evicted: no effect
    assert store.size == OVERHEAD + 100
    counted = Store(10**9, max_count=2)
    a, b, c = exchange(1, "x"), exchange(1, "y"), exchange(1, "x")
    for ex in (a, b, c):
        counted.add(ex)
    assert counted.newest(10) == [c, b]
    assert counted.newest(1) == [c] and counted.newest(10, "y") == [b]
    counted.clear()
    assert counted.newest(10) == [] and counted.size == 0


# -- the agent end to end ------------------------------------------------------------------


@contextmanager
def counting_upstream() -> Iterator[tuple[int, dict[str, int]]]:
    """A service answering "<method> <path> #<how many times this path came> <body>"."""
    seen: dict[str, int] = {}
    lock = threading.Lock()

    class Handler(StubHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            body = self.body()
            with lock:
                seen[self.path] = count = seen.get(self.path, 0) + 1
            out = f"{self.command} {self.path} #{count} {body.decode()}".encode()
            self.send(200, {"Content-Type": "text/plain"}, out)

        do_POST = do_GET

    with serving(Handler) as server:
        yield server.server_address[1], seen


def captures(a: Agent, query: str = "", count: int = 0) -> list[dict[str, Any]]:
    """The listing; with ``count``, once that many have their response (or 10 s passed)."""
    deadline = time.monotonic() + 30
    while True:
        r = a.api("GET", "/api/requests/http" + query)
        assert r.status_code == 200 and r.json()["uri"] == "/api/requests/http", r.text
        got: list[dict[str, Any]] = r.json()["requests"]
        if sum(c["response"] is not None for c in got) >= count or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def test_the_agent_captures_lists_replays_and_clears(srv: Server, tmp_path: Path) -> None:
    from tests.agent.test_agent import run_agent, write_config  # (it may skip: no SDK)

    with srv.client() as api:
        token = api.post("/credentials", json={}).json()["token"]
    web = free_port()
    with counting_upstream() as (port, seen):
        cfg = write_config(tmp_path / "a.yml", srv, token, web, (
            f"tunnels:\n  web:\n    proto: http\n    addr: {port}\n"
            f"  quiet:\n    proto: http\n    addr: {port}\n    inspect: false\n"))
        a = run_agent("--all", "--config", str(cfg), web_port=web)
        try:
            urls = {n: a.api("GET", f"/api/tunnels/{n}").json()["public_url"]
                    for n in ("web", "quiet")}
            with EdgeClient(srv) as client:
                assert client.get(urls["web"] + "/count/a?x=1").text == "GET /count/a?x=1 #1 "
                r = client.request("POST", urls["web"] + "/count/b", content=b"hello")
                assert r.text == "POST /count/b #1 hello"
                assert client.get(urls["quiet"] + "/count/q").text == "GET /count/q #1 "
            post, get = got = captures(a, count=2)
            assert len(got) == 2 and {c["tunnel_name"] for c in got} == {"web"}
            assert [(c["request"]["method"], c["request"]["uri"]) for c in got] == [
                ("POST", "/count/b"), ("GET", "/count/a?x=1")]
            assert [c["response"]["status"] for c in got] == ["200 OK", "200 OK"]
            assert raw(post["request"]).startswith(b"POST /count/b HTTP/1.1\r\n")
            assert raw(post["request"]).endswith(b"\r\n\r\nhello")
            assert raw(post["response"]).endswith(b"\r\n\r\nPOST /count/b #1 hello")
            assert post["response"]["headers"]["Content-Type"] == ["text/plain"]
            assert post["remote_addr"].startswith("127.0.0.1:") and post["duration"] > 0
            # the filters, one request, errors
            assert seen["/count/q"] == 1 and captures(a, "?tunnel_name=quiet") == []
            assert [c["id"] for c in captures(a, "?tunnel_name=web&limit=1")] == [post["id"]]
            for bad in ("abc", "0", "-1"):
                r = a.api("GET", f"/api/requests/http?limit={bad}")
                assert r.status_code == 400 and "limit" in r.json()["details"]["err"]
            assert a.api("GET", f"/api/requests/http/{get['id']}").json() == get
            assert a.api("GET", "/api/requests/http/req_nope").status_code == 404
            # replay: the service sees the request again, and it is captured anew
            for body, status in (({"id": "req_nope"}, 404), ([1], 400),
                                 ({"id": post["id"], "tunnel_name": "missing"}, 404)):
                assert a.api("POST", "/api/requests/http", json=body).status_code == status
            r = a.api("POST", "/api/requests/http", json={"id": post["id"]})
            assert r.status_code == 204, r.text
            again = captures(a, count=3)[0]
            assert seen["/count/b"] == 2 and again["id"] != post["id"]
            assert raw(again["request"]) == raw(post["request"])  # the same Host, body…
            assert raw(again["response"]).endswith(b"POST /count/b #2 hello")
            with EdgeClient(srv) as client:  # a body past the cap: captured in part, no replay
                r = client.request("POST", urls["web"] + "/count/big", content=bytes(70_000))
                assert r.status_code == 200
            big = captures(a, "?limit=1", count=1)[0]
            assert big["request"]["uri"] == "/count/big" and big["request"]["truncated"]
            r = a.api("POST", "/api/requests/http", json={"id": big["id"]})
            assert r.status_code == 400 and "64 KiB" in r.json()["details"]["err"]
            assert a.api("DELETE", "/api/requests/http").status_code == 204
            assert captures(a) == []
            assert a.api("GET", f"/api/requests/http/{get['id']}").status_code == 404
        finally:
            a.stop()
    off = free_port()
    cfg = write_config(tmp_path / "off.yml", srv, token, off, "inspect_db_size: -1\n")
    b = run_agent("--none", "--config", str(cfg), web_port=off)
    try:
        r = b.api("GET", "/api/requests/http")
        assert r.status_code == 404 and r.json()["msg"] == "request inspection is disabled"
    finally:
        b.stop()
