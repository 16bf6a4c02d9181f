"""The pure parts of the hand-off between workers, without processes: the message a socket
travels with (hostile bytes refused with the reason, never half-read), which sibling holds a
connection's tunnels (only one sibling holding every tunnel takes it), the Host of a peeked
request head (a head split, a Host missing or doubled: served where it arrived), and the
tunnels behind an edge's backend (anything that is not a tunnel: served where it arrived).
The hand-off itself, between two real workers, is ``test_workers``."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from edgeway.edge import backends, handover
from edgeway.edge.backends import compile_backend
from edgeway.nodes.handoff import Handed, Handoff, decode, encode, sibling_path
from edgeway.tunnel.binds import BindRequest
from edgeway.tunnel.registry import Registry, Tunnel


class _Carrier:
    def __init__(self, where: str | None) -> None:
        self.where = where
        self._closed = asyncio.Event()

    @property
    def closed(self) -> asyncio.Event:
        return self._closed

    @property
    def crowded(self) -> bool:
        return False

    async def open_pipe(self, *_args: object) -> object:
        raise AssertionError("not opened here")


def _tunnel(id_: str, where: str | None, labels: dict[str, str] | None = None,
            host: str = "", proto: str = "https") -> Tunnel:
    req = BindRequest(id_, "" if labels else proto, "", host, "", "", {}, labels or {})
    return Tunnel(id_, _Carrier(where), req, host=host)  # type: ignore[arg-type]


def test_a_message_round_trips_and_hostile_ones_are_refused_with_the_reason() -> None:
    handed = Handed("tcp", ("2001:db8::1", 443), "tn_1")
    assert decode(encode(handed)) == handed
    for data, reason in ((b"\xff\xfe", "not JSON"), (b"[]", "not a hand-off message"),
                         (b'{"kind":"http","peer":["a",1]}', "not a hand-off message"),
                         (b'{"kind":"ssh","peer":["a",1],"ref":""}', "unknown kind"),
                         (b'{"kind":"http","peer":["a",70000],"ref":""}', "[host, port]"),
                         (b'{"kind":"http","peer":["a","1"],"ref":""}', "[host, port]"),
                         (b'{"kind":"http","peer":["a",1],"ref":7}', "unknown kind"),
                         (b" " * 2000, "2000 bytes")):
        with pytest.raises(ValueError, match=reason):
            decode(data)


def test_only_a_worker_link_has_a_sibling_socket() -> None:
    assert sibling_path("unix:/var/lib/edgeway/workers/1/link.sock") == \
        "/var/lib/edgeway/workers/1/handoff.sock"
    assert sibling_path("10.0.0.2:7400") is None
    assert sibling_path("[::1]:7400") is None


def test_a_connection_goes_over_only_when_one_sibling_holds_every_tunnel() -> None:
    off = Handoff("/w/0/handoff.sock", lambda t: t.conn.where)  # type: ignore[union-attr]
    one, other = _tunnel("a", "/w/1/handoff.sock"), _tunnel("b", "/w/1/handoff.sock")
    here, third = _tunnel("c", None), _tunnel("d", "/w/2/handoff.sock")
    assert off.target([one, other]) == "/w/1/handoff.sock"
    assert off.target([one, here]) is None  # (some are held here: served here)
    assert off.target([one, third]) is None  # (two siblings: the link picks per request)
    assert off.target([here]) is None and off.target([]) is None


def test_a_socket_no_sibling_holds_stays_here() -> None:
    async def run() -> bool:
        off = Handoff("/nonexistent/handoff.sock", lambda _t: None)
        a, b = socket.socketpair()
        try:
            handed = await off.offer(a, "http", ("127.0.0.1", 1), "", [_tunnel("a", None)])
            assert a.fileno() >= 0  # (still this worker's to serve)
            return handed
        finally:
            a.close()
            b.close()
    assert asyncio.run(run()) is False


@pytest.mark.parametrize(("head", "host"), [
    (b"GET / HTTP/1.1\r\nHost: App.Example.COM:8080\r\n\r\n", "app.example.com"),
    (b"GET / HTTP/1.1\r\nhost:a.example.\r\nX: y\r\n\r\nbody", "a.example"),
    (b"GET / HTTP/1.1\r\nHost: [::1]\r\n\r\n", "[::1]"),
    (b"GET / HTTP/1.1\r\nHost: a.example\r\n", None),  # (the head is not whole yet)
    (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", None),  # (two: the parser refuses)
    (b"GET / HTTP/1.1\r\nX-Host: a\r\n\r\n", None),
    (b"GET / HTTP/1.1\r\nHost:\r\n\r\n", None),
])
def test_the_host_of_a_peeked_head(head: bytes, host: str | None) -> None:
    assert handover.head_host(head) == host


def test_the_tunnels_behind_a_backend_or_none_when_it_may_pick_anything_else() -> None:
    docs: dict[str, tuple[str, dict[str, Any]]] = {
        "bkdtg_web": ("backends/tunnel_group", {"labels": {"svc": "web"}}),
        "bkdtg_api": ("backends/tunnel_group", {"labels": {"svc": "api"}}),
        "bkdst_s": ("backends/static", {"address": "127.0.0.1:1"}),
        "bkdfo_tunnels": ("backends/failover", {"backends": ["bkdtg_web", "bkdtg_api"]}),
        "bkdwt_mixed": ("backends/weighted", {"backends": {"bkdtg_web": 1, "bkdst_s": 1}}),
        "bkdfo_loop": ("backends/failover", {"backends": ["bkdfo_loop"]}),
    }
    snap = {id_: compile_backend(c, doc) for id_, (c, doc) in docs.items()}
    reg = Registry()
    web = _tunnel("web", "/w/1/handoff.sock", {"svc": "web"})
    api = _tunnel("api", None, {"svc": "api"})
    reg.add(web)
    reg.add(api)
    assert backends.tunnels_behind(snap, "bkdtg_web", reg) == [web]
    assert backends.tunnels_behind(snap, "bkdfo_tunnels", reg) == [web, api]
    assert backends.tunnels_behind(snap, "bkdwt_mixed", reg) is None
    assert backends.tunnels_behind(snap, "bkdst_s", reg) is None
    assert backends.tunnels_behind(snap, "bkdfo_loop", reg) is None
    assert backends.tunnels_behind(snap, "bkdst_gone", reg) is None


def test_agents_prefer_the_tunnels_of_the_scheme() -> None:
    reg = Registry()
    plain = _tunnel("p", None, host="a.example", proto="http")
    tls = _tunnel("s", "/w/1/handoff.sock", host="a.example", proto="https")
    reg.add(plain)
    reg.add(tls)
    assert handover.agents(reg, "a.example", "https") == [tls]
    assert handover.agents(reg, "a.example", "http") == [plain]
    assert handover.agents(reg, "b.example", "http") == []
