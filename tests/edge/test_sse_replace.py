"""The traffic policy's ``sse-find-replace`` (phase ``on_event_stream_message``) on real
traffic: an upstream's event stream, its messages written at the upstream's pace (the next
only once the client has the one before: it streams, it is not gathered), with CRLF and LF
line ends, a CRLF cut between two writes, comments, ``event``/``id`` lines and multi-line
data; replacements on ``data`` and ``retry`` with group references and interpolation; a
compressed stream (its upstream was asked for none) is cut, never passed on unchanged."""

from __future__ import annotations

import gzip
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from tests.edge.agents import EdgeClient, agent
from tests.edge.upstream import accept_in_threads
from tests.server import Server

FIRST = (b": a comment\r\nevent: note\r\ndata: hello secret-123\r\n"
         b"data: second line secret-4\r\nid: 7\r\n\r")  # (its last LF: the next write)
SECOND = b"retry: 100\ndata: plain\n\n"
POLICY = json.dumps({"on_event_stream_message": [
    {"actions": [{"type": "sse-find-replace", "config": {"replacements": [
        {"from": r"secret-(\d)\d*", "to": "[redacted $1]"},
        {"field": "retry", "from": r"\d+", "to": "5000"}]}}]},
    {"expressions": ["req.url.path == '/sse' && res.status_code == 200"],
     "actions": [{"type": "sse-find-replace", "config": {"replacements": [
         {"from": "hello", "to": "hi from ${req.url.path}"}]}}]},
]})


@contextmanager
def sse_upstream() -> Iterator[tuple[int, threading.Event, list[bytes]]]:
    """An HTTP upstream: ``/sse`` writes FIRST, its last byte, then (once ``go`` is set)
    SECOND; ``/gz`` a gzipped event stream. The request heads it got are kept."""
    listener = socket.create_server(("127.0.0.1", 0))
    go, heads = threading.Event(), []

    def answer(conn: socket.socket) -> None:
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                head += conn.recv(65536)
            heads.append(head)
            start = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n"
            if head.startswith(b"GET /gz "):
                conn.sendall(start + b"Content-Encoding: gzip\r\n\r\n"
                             + gzip.compress(b"data: secret-1\n\n"))
                return
            conn.sendall(start + b"\r\n" + FIRST)
            conn.sendall(b"\n")
            if go.wait(20):
                conn.sendall(SECOND)

    accept_in_threads(listener, answer)
    try:
        yield listener.getsockname()[1], go, heads
    finally:
        go.set()
        listener.close()


def test_event_stream_messages_are_rewritten_as_they_stream(srv: Server, token: str) -> None:
    with sse_upstream() as (port, go, heads):
        a = agent(srv, token, {"kind": "http", "forward": f"http://127.0.0.1:{port}",
                               "policy": POLICY})
        try:
            host = a.urls[0].split("://", 1)[1]
            with EdgeClient(srv) as web, web.http.stream(
                    "GET", f"http://127.0.0.1:{srv.http_port}/sse",
                    headers={"Host": host, "Accept-Encoding": "gzip"}) as r:
                assert r.status_code == 200
                assert r.headers["content-type"] == "text/event-stream"
                got = b""
                chunks = r.iter_raw()
                want = (b": a comment\r\nevent: note\r\ndata: hi from /sse [redacted 1]\r\n"
                        b"data: second line [redacted 4]\r\nid: 7\r\n\r\n")
                while len(got) < len(want):
                    got += next(chunks, b"<END>")
                    assert not got.endswith(b"<END>"), got  # (not cut short)
                assert got == want  # the first message, before the upstream sent the next
                go.set()
                rest = b"".join(chunks)
                assert rest == b"retry: 5000\ndata: plain\n\n"
            assert b"accept-encoding" not in heads[0].lower()  # it asks for identity
            with EdgeClient(srv) as web, pytest.raises(httpx.HTTPError):
                web.get(f"http://{host}/gz").raise_for_status()
        finally:
            a.stop()


def test_what_sse_find_replace_cannot_honour_is_refused() -> None:
    from edgeway.edge.hooks import Unenforced
    from edgeway.edge.modules import traffic_policy as tp
    for cfg, said in (({}, "replacements"), ({"replacements": []}, "replacements"),
                      ({"replacements": [{"field": "event", "from": "a"}]}, "field 'event'"),
                      ({"replacements": [{"from": "("}]}, "pattern"),
                      ({"replacements": [{"from": "a", "to": "$2"}]}, "group 2")):
        compiled = tp.compile({"value": json.dumps({"on_event_stream_message": [
            {"actions": [{"type": "sse-find-replace", "config": cfg}]}]})}, "r")
        assert isinstance(compiled, Unenforced) and said in compiled.what, cfg


def test_messages_cut_anywhere_come_out_the_same() -> None:
    """The stream filter on its own: one stream cut at every byte gives the same output."""
    from edgeway.edge.modules import sse_replace
    action = sse_replace.compile({"replacements": [{"from": "x+", "to": "y"}]}, None)  # type: ignore[arg-type]
    stream = b"data: axxb\r\n\r\ndata: 1\ndata: xx\n\n:c\r\rdata: x\r\r" + b"data: tail x"
    expected = b"data: ayb\r\n\r\ndata: 1\ndata: y\n\n:c\r\rdata: y\r\rdata: tail y"
    for cut in range(len(stream) + 1):
        f = sse_replace.Stream(lambda _env: iter([action]), {}, False)
        out = f.data(stream[:cut]) + f.data(stream[cut:]) + f.end()
        assert out == expected, cut
    big = sse_replace.Stream(lambda _env: iter([action]), {}, False)
    with pytest.raises(ConnectionResetError):
        big.data(b"data: " + b"x" * (sse_replace.MAX_MESSAGE + 1))
