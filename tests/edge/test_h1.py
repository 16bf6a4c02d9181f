"""The edge's HTTP/1.1 codec, sans I/O: scripted bytes in, events out."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgeway.edge import h1
from edgeway.edge.h1 import (
    BadMessage,
    End,
    Framer,
    Request,
    RequestParser,
    Response,
)
from edgeway.edge.h1_response import ResponseParser

PIPELINED = (b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
             b"POST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
             b"5\r\nhello\r\n6\r\n world\r\n0\r\nX-Sum: 1\r\n\r\n"
             b"PUT /c HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc")


def events(parser: RequestParser | ResponseParser) -> list[h1.Event]:
    out = []
    while (ev := parser.next_event()) is not None:
        out.append(ev)
    return out


def summary(evs: list[h1.Event]) -> list[object]:
    """Requests by method and target, body bytes joined per message, Ends with trailers."""
    out: list[object] = []
    for ev in evs:
        if isinstance(ev, Request):
            out.append((ev.method, ev.target, ev.body, ev.keep_alive))
        elif isinstance(ev, bytes):
            if out and isinstance(out[-1], bytes):
                out[-1] += ev
            else:
                out.append(ev)
        elif isinstance(ev, End):
            out.append(("end", ev.trailers))
    return out


EXPECTED = [(b"GET", b"/a", False, True), ("end", []),
            (b"POST", b"/b", True, True), b"hello world", ("end", [(b"X-Sum", b"1")]),
            (b"PUT", b"/c", True, False), b"abc", ("end", [])]


def test_pipelined_requests_with_chunked_and_sized_bodies() -> None:
    p = RequestParser()
    p.feed(PIPELINED)
    assert summary(events(p)) == EXPECTED
    assert not p.mid_message


@given(st.lists(st.integers(1, len(PIPELINED) - 1), max_size=12, unique=True))
def test_any_split_of_the_bytes_gives_the_same_events(cuts: list[int]) -> None:
    p, got, last = RequestParser(), [], 0
    for cut in [*sorted(cuts), len(PIPELINED)]:
        p.feed(PIPELINED[last:cut])
        got += events(p)
        last = cut
    assert summary(got) == EXPECTED


@pytest.mark.parametrize(("data", "status", "words"), [
    (b"GET / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 400,
     "Transfer-Encoding"),
    (b"GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400, "Content-Length"),
    (b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n", 400, "header"),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 400, "method"),
    (b"GET / HTTP/1.1\r\nX-Big: " + b"a" * (h1.MAX_HEAD + 1) + b"\r\n\r\n", 431, "larger"),
    (b"GET /" + b"a" * (h1.MAX_HEAD + 1) + b" HTTP/1.1\r\n\r\n", 431, "larger"),
    (b"GET / HTTP/1.1\r\n\r\n", 400, "one Host header (this one has 0)"),
    (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, "(this one has 2)"),
    (b"POST / HTTP/1.1\r\nHost: a\r\nConnection: Content-Length\r\nContent-Length: 1\r\n\r\n",
     400, "names content-length, which frames"),
    (b"GET / HTTP/1.1\r\nHost: a\r\nConnection: x, HOST, transfer-encoding\r\n\r\n", 400,
     "names host, transfer-encoding"),
    (b"GET ftp://a/ HTTP/1.1\r\nHost: a\r\n\r\n", 400, "http or https URL"),
    (b"GET http://u:p@a/ HTTP/1.1\r\nHost: a\r\n\r\n", 400, "no user"),
])
def test_malformed_requests_name_the_problem(data: bytes, status: int, words: str) -> None:
    p = RequestParser()
    p.feed(data)
    with pytest.raises(BadMessage) as caught:
        p.next_event()
    assert caught.value.status == status
    assert words.lower() in str(caught.value).lower()


def test_requests_pipelined_ahead_of_garbage_are_answered_first() -> None:
    p = RequestParser()
    p.feed(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nnot http\r\n\r\n")
    p.feed(b"GET /b HTTP/1.1\r\nHost: x\r\n\r\n")  # after the error: ignored
    req, end = p.next_event(), p.next_event()
    assert isinstance(req, Request) and req.target == b"/a" and isinstance(end, End)
    with pytest.raises(BadMessage):
        p.next_event()


def test_http10_and_connection_close_are_not_kept_alive() -> None:
    p = RequestParser()
    p.feed(b"GET / HTTP/1.0\r\n\r\n")
    req = events(p)[0]
    assert isinstance(req, Request) and req.http10 and not req.keep_alive


def test_an_upgrade_pauses_parsing_and_resumes_when_refused() -> None:
    p = RequestParser()
    p.feed(b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
           b"\x81\x05frame")
    p.feed(b"more")
    req, end = events(p)
    assert isinstance(req, Request) and req.upgrade and isinstance(end, End)
    assert p.upgraded == b"\x81\x05framemore"  # not HTTP: kept for the splice
    p = RequestParser()
    p.feed(b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           b"\r\nGET /next HTTP/1.1\r\nHost: x\r\n\r\n")
    assert len(events(p)) == 2
    p.resume()  # the upstream said no: what followed is the next request
    nxt = events(p)[0]
    assert isinstance(nxt, Request) and nxt.target == b"/next" and not nxt.upgrade


@pytest.mark.parametrize("split", [0, 60, 85, 95, 100])
def test_an_upgrade_request_with_a_body_goes_as_plain_http(split: int) -> None:
    data = (b"POST /x HTTP/1.1\r\nHost: x\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n"
            b"Content-Length: 5\r\n\r\nhelloGET /n HTTP/1.1\r\nHost: x\r\n\r\n")
    p = RequestParser()
    p.feed(data[:split])
    p.feed(data[split:])
    got = summary(events(p))
    assert got == [(b"POST", b"/x", True, True), b"hello", ("end", []),
                   (b"GET", b"/n", False, True), ("end", [])]
    assert p.upgraded == b"" and not p.mid_message
    p = RequestParser()
    p.feed(b"POST /x HTTP/1.1\r\nHost: x\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n"
           b"Content-Length: 5\r\n\r\n")
    req = p.next_event()
    assert isinstance(req, Request) and not req.upgrade and p.mid_message
    p = RequestParser()
    p.feed(b"POST /x HTTP/1.1\r\nHost: x\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n"
           b"Transfer-Encoding: chunked\r\n\r\n")
    with pytest.raises(BadMessage, match="chunked body"):  # before its head is seen
        p.next_event()


def test_responses_informational_then_final_with_trailers() -> None:
    p = ResponseParser()
    p.expect(head=False)
    p.feed(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 Fine\r\nTransfer-Encoding: chunked\r\n"
           b"\r\n3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n")
    info, final, body, end = events(p)
    assert isinstance(info, Response) and info.status == 100 and not info.keep_alive
    assert isinstance(final, Response) and (final.status, final.reason) == (200, b"Fine")
    assert final.keep_alive and final.length is None
    assert body == b"abc" and end == End([(b"X-T", b"1")])
    assert p.idle


def test_head_response_is_the_head_alone_whatever_its_length() -> None:
    p = ResponseParser()
    p.expect(head=True)
    p.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n")
    assert events(p) == []
    p.feed(b"\r\n")
    resp, end = events(p)
    assert isinstance(resp, Response) and resp.length == 1234 and resp.keep_alive
    assert isinstance(end, End) and p.idle
    p.expect(head=False)  # the next request on this connection: a GET with a body
    p.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    assert events(p)[1:] == [b"ok", End()]
    p.expect(head=True)
    p.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")  # a body it must not send
    assert len(events(p)) == 2 and not p.idle


@pytest.mark.parametrize("status", [204, 304])
def test_bodiless_statuses(status: int) -> None:
    p = ResponseParser()
    p.expect(head=False)
    p.feed(b"HTTP/1.1 %d X\r\n\r\n" % status)
    resp, end = events(p)
    assert isinstance(resp, Response) and resp.status == status and isinstance(end, End)
    assert p.idle


def test_close_delimited_body_ends_at_eof_and_a_sized_one_must_not() -> None:
    p = ResponseParser()
    p.expect(head=False)
    p.feed(b"HTTP/1.1 200 OK\r\n\r\nuntil")
    p.feed(b" eof")
    resp = events(p)
    assert isinstance(resp[0], Response) and not resp[0].keep_alive
    assert resp[1:] == [b"until", b" eof"]
    p.eof()
    assert events(p) == [End()]
    p = ResponseParser()
    p.expect(head=False)
    p.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort")
    events(p)
    with pytest.raises(BadMessage, match="mid-response"):
        p.eof()
    p = ResponseParser()
    p.expect(head=False)
    p.eof()  # nothing asked yet, nothing under way: no event, no error
    assert events(p) == []


def test_switching_protocols_keeps_what_followed() -> None:
    p = ResponseParser()
    p.expect(head=False)
    p.feed(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
           b"Connection: Upgrade\r\n\r\n\x81\x02hi")
    resp, end = events(p)
    assert isinstance(resp, Response) and resp.status == 101 and isinstance(end, End)
    assert p.upgraded == b"\x81\x02hi" and not p.idle


def test_invalid_upstream_response_is_a_502() -> None:
    p = ResponseParser()
    p.expect(head=False)
    with pytest.raises(BadMessage) as caught:
        p.feed(b"SSH-2.0-OpenSSH_9.2\r\n")
    assert caught.value.status == 502 and "not valid HTTP" in str(caught.value)


def test_hop_by_hop_headers_stay_on_their_hop() -> None:
    headers = [(b"Host", b"x"), (b"Connection", b"keep-alive, X-Private"), (b"X-Private", b"1"),
               (b"Keep-Alive", b"timeout=5"), (b"TE", b"trailers"), (b"Proxy-Connection", b"x"),
               (b"Transfer-Encoding", b"chunked"), (b"Upgrade", b"websocket"), (b"X-Kept", b"2")]
    assert h1.end_to_end(headers) == [(b"Host", b"x"), (b"X-Kept", b"2")]
    assert (b"Upgrade", b"websocket") in h1.end_to_end(headers, frozenset({b"upgrade"}))


def test_keep_alive_alone_names_nothing_more_and_every_connection_header_counts() -> None:
    """``Connection: keep-alive`` (most responses) removes only the hop-by-hop headers; a
    second ``Connection`` header naming another still removes that one."""
    plain = [(b"Connection", b"Keep-Alive"), (b"Keep-Alive", b"timeout=5"), (b"X-A", b"1")]
    assert h1.end_to_end(plain) == [(b"X-A", b"1")]
    two = [(b"Connection", b"keep-alive"), (b"X-Private", b"1"), (b"Connection", b"X-Private"),
           (b"X-A", b"1")]
    assert h1.end_to_end(two) == [(b"X-A", b"1")]
    spaced = [(b"Connection", b"keep-alive , X-Private"), (b"X-Private", b"1"), (b"X-A", b"1")]
    assert h1.end_to_end(spaced) == [(b"X-A", b"1")]


def test_a_response_keeps_the_framing_its_connection_header_names() -> None:
    headers = [(b"Connection", b"Content-Length, Host, X-Private"), (b"Content-Length", b"5"),
               (b"Host", b"x"), (b"X-Private", b"1")]
    assert h1.end_to_end(headers) == [(b"Content-Length", b"5"), (b"Host", b"x")]


@pytest.mark.parametrize(("target", "origin", "host"), [
    (b"http://b.example/p?q=1", b"/p?q=1", b"b.example"),
    (b"HTTPS://B.example:8443", b"/", b"B.example:8443"),
    (b"http://b.example?q", b"/?q", b"b.example"),
    (b"/http://a.example/", b"/http://a.example/", b"a.example"),  # origin form: as it is
])
def test_an_absolute_form_target_becomes_origin_form_and_host(target: bytes, origin: bytes,
                                                              host: bytes) -> None:
    p = RequestParser()
    p.feed(b"GET %b HTTP/1.1\r\nHost: a.example\r\nX: 1\r\n\r\n" % target)
    req = p.next_event()
    assert isinstance(req, Request) and req.target == origin
    assert [v for k, v in req.headers if k.lower() == b"host"] == [host]


def test_framer_and_head() -> None:
    assert h1.head(b"HTTP/1.1 200 OK\r\n", [(b"A", b"1")]) == b"HTTP/1.1 200 OK\r\nA: 1\r\n\r\n"
    chunked = Framer(True)
    assert chunked.data(b"hello") == b"5\r\nhello\r\n"
    assert chunked.data(b"") == b""  # an empty chunk would end the body
    assert chunked.end() == b"0\r\n\r\n"
    assert chunked.end([(b"X-T", b"1")]) == b"0\r\nX-T: 1\r\n\r\n"
    plain = Framer(False)
    assert plain.data(b"abc") == b"abc" and plain.end([(b"X-T", b"1")]) == b""
    assert h1.bodiless(204, b"GET") and h1.bodiless(200, b"HEAD") and not h1.bodiless(200, b"GET")
