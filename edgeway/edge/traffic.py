"""The public listeners' traffic events, handed to the events' sink (``events/traffic.py``):
an HTTP exchange as ``http_request_complete.v0`` (``emit_http``, once per request the HTTP
edge answers or gives up on) and a TCP connection as ``tcp_connection_closed.v0``
(``TcpEvents``, told by every TCP listener when a connection ends). Objects are built only
when a subscription takes the type; their members are ``catalog/event_types.TRAFFIC``'s.
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

import msgspec

from edgeway.catalog.event_types import HTTP, TCP
from edgeway.edge.h1 import Request
from edgeway.edge.hooks import Exchange
from edgeway.edge.modules.policy_values import LOGS
from edgeway.edge.router import Decision, EdgeRouter
from edgeway.events.envelope import stamp
from edgeway.events.traffic import TrafficSink
from edgeway.tunnel.registry import Tunnel
from edgeway.tunnel.tcp import TcpListener

__all__ = ["HTTP", "TCP", "TcpEvents", "emit_http", "http_object", "http_record", "tcp_object"]
# tcp_info: tcpi_state, ..., tcpi_bytes_acked, tcpi_bytes_received (Linux 4.2+)
_TCP_INFO = struct.Struct("=B119xQQ")
# the kernel counts a FIN in those sequence-number counts: states after the peer's FIN
# arrived, and after ours was acknowledged
_PEER_FIN = frozenset({6, 8, 9, 11})  # TIME_WAIT, CLOSE_WAIT, LAST_ACK, CLOSING
_OUR_FIN_ACKED = frozenset({5, 6})  # FIN_WAIT2, TIME_WAIT


def _ms(seconds: float) -> float:
    return int(seconds * 1_000_000) / 1000


def http_record(x: Exchange, req: Request, decision: Decision, started: float,
                ended: float) -> tuple[Any, ...]:
    """What happened to one request (``req`` as it arrived, before any rewrite), as one flat
    tuple: events wait in the sink's queue in this form, which keeps the garbage collector's
    work per event to one object (``http_object`` makes the event's object of it)."""
    target = decision.target
    logs = x.env.get(LOGS) if x.env is not None else None
    host = agent = b""
    for name, value in req.headers:
        low = name.lower()
        if low == b"host":
            host = value
        elif low == b"user-agent":
            agent = value
    return (x.ip, x.port, x.scheme, req.method, req.target, host, agent, req.http10,
            x.received or len(x.body or b""), x.status, x.sent, ended - started,
            x.answered - started if x.answered else None, decision.edge_id,
            decision.route_id, decision.plan.backend_id,
            target.id if isinstance(target, Tunnel) else "", tuple(logs) if logs else ())


# The objects, as msgspec structs (encoded as JSON objects of these members, in this order):
# made and encoded in a third of the time of dicts, and untracked by the garbage collector
class _Conn(msgspec.Struct, gc=False):
    client_ip: str
    client_port: int


class _Url(msgspec.Struct, gc=False):
    scheme: str
    host: str
    path: str
    query: str


class _Request(msgspec.Struct, gc=False):
    method: str
    url: _Url
    version: str
    user_agent: str
    body_bytes: int


class _Response(msgspec.Struct, gc=False):
    status_code: int
    body_bytes: int


class _Http(msgspec.Struct, gc=False):
    request: _Request
    response: _Response
    duration_ms: float
    upstream_ms: float | None


class _Ref(msgspec.Struct, gc=False):
    id: str | None


class _Policy(msgspec.Struct):
    logs: list[Any]


_NO_LOGS = _Policy([])  # (shared: never changed)


class HttpObject(msgspec.Struct, gc=False):
    conn: _Conn
    http: _Http
    edge: _Ref
    route: _Ref
    backend: _Ref
    tunnel: _Ref
    traffic_policy: _Policy


def http_object(r: tuple[Any, ...]) -> HttpObject:
    """``http_request_complete.v0``'s object, from ``http_record``'s tuple."""
    (ip, port, scheme, method, target, host, agent, http10, received, status, sent, took,
     upstream, edge, route, backend, tunnel, logs) = r
    path, _, query = target.decode("latin-1").partition("?")
    return HttpObject(
        _Conn(ip, port),
        _Http(_Request(method.decode("latin-1"),
                       _Url(scheme, host.decode("latin-1"), path, query),
                       "HTTP/1.0" if http10 else "HTTP/1.1", agent.decode("latin-1"), received),
              _Response(status, sent), _ms(took), None if upstream is None else _ms(upstream)),
        _Ref(edge or None), _Ref(route or None), _Ref(backend or None), _Ref(tunnel or None),
        _Policy(list(logs)) if logs else _NO_LOGS)


def emit_http(sink: TrafficSink, x: Exchange, req: Request, decision: Decision,
              started: float) -> None:
    """Queue the event of a request the edge has answered (or given up on)."""
    sink.emit(HTTP, http_object, http_record(x, req, decision, started, time.monotonic()))


def _counters(sock: Any) -> tuple[int | None, int | None]:
    """(bytes received from the client, bytes it acknowledged), from the kernel's TCP_INFO
    (None where the kernel does not say)."""
    try:
        raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO.size)
        state, acked, received = _TCP_INFO.unpack_from(raw)
    except (OSError, AttributeError, struct.error):
        return None, None
    return max(0, received - (state in _PEER_FIN)), max(0, acked - (state in _OUR_FIN_ACKED))


class TcpEvents:
    """``tcp_connection_closed.v0`` of the TCP listeners (TCP tunnels and TCP edges)."""

    def __init__(self, sink: TrafficSink, router: EdgeRouter) -> None:
        self.sink, self.router = sink, router

    def closed(self, listener: TcpListener, peer: tuple[str, int], sock: Any,
               started: float) -> None:
        if not self.sink.wants(TCP):
            return
        bytes_in, bytes_out = _counters(sock)
        edge = self.router.snapshot.tcp.get(listener.port) if not listener.owner else None
        self.sink.emit(TCP, tcp_object, (
            peer[0], peer[1], listener.port, bytes_in, bytes_out, started,
            time.time() - started, edge.id if edge else None, listener.owner or None))


class _TcpConn(msgspec.Struct, gc=False):
    client_ip: str
    client_port: int
    server_port: int
    bytes_in: int | None
    bytes_out: int | None
    start_ts: str
    duration_ms: float


class TcpObject(msgspec.Struct, gc=False):
    conn: _TcpConn
    edge: _Ref
    tunnel: _Ref


def tcp_object(r: tuple[Any, ...]) -> TcpObject:
    """``tcp_connection_closed.v0``'s object, from ``TcpEvents.closed``'s tuple."""
    ip, port, server_port, bytes_in, bytes_out, started, took, edge, tunnel = r
    return TcpObject(_TcpConn(ip, port, server_port, bytes_in, bytes_out, stamp(started),
                              _ms(took)), _Ref(edge), _Ref(tunnel))
