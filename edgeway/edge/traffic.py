"""The public listeners' traffic events, handed to the events' sink (``events/traffic.py``):
an HTTP exchange as ``http_request_complete.v0`` (``observed``, once per request the HTTP
edge answers or gives up on) and a TCP connection as ``tcp_connection_closed.v0``
(``TcpEvents``, told by every TCP listener when a connection ends). Objects are built only
when a subscription takes the type; their members are ``catalog/event_types.TRAFFIC``'s.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Awaitable
from typing import Any

from edgeway.catalog.event_types import HTTP, TCP
from edgeway.edge.h1 import Request, header
from edgeway.edge.hooks import Exchange
from edgeway.edge.modules.policy_actions import LOGS
from edgeway.edge.router import Decision, EdgeRouter
from edgeway.events.envelope import stamp
from edgeway.events.traffic import TrafficSink
from edgeway.tunnel.registry import Tunnel
from edgeway.tunnel.tcp import TcpListener

__all__ = ["HTTP", "TCP", "TcpEvents", "http_object", "observed"]
# tcp_info: tcpi_state, ..., tcpi_bytes_acked, tcpi_bytes_received (Linux 4.2+)
_TCP_INFO = struct.Struct("=B119xQQ")
# the kernel counts a FIN in those sequence-number counts: states after the peer's FIN
# arrived, and after ours was acknowledged
_PEER_FIN = frozenset({6, 8, 9, 11})  # TIME_WAIT, CLOSE_WAIT, LAST_ACK, CLOSING
_OUR_FIN_ACKED = frozenset({5, 6})  # FIN_WAIT2, TIME_WAIT


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def http_object(x: Exchange, req: Request, decision: Decision, started: float,
                ended: float) -> dict[str, Any]:
    """What happened to one request (``req`` as it arrived, before any rewrite)."""
    path, _, query = req.target.decode("latin-1").partition("?")
    target = decision.target
    logs = x.env.get(LOGS) if x.env is not None else None
    return {
        "conn": {"client_ip": x.ip, "client_port": x.port},
        "http": {
            "request": {"method": req.method.decode("latin-1"), "url": {
                "scheme": x.scheme, "host": header(req.headers, b"host").decode("latin-1"),
                "path": path, "query": query}, "version": "HTTP/1.0" if req.http10 else
                "HTTP/1.1", "user_agent": header(req.headers, b"user-agent").decode("latin-1"),
                "body_bytes": x.received or len(x.body or b"")},
            "response": {"status_code": x.status, "body_bytes": x.sent},
            "duration_ms": _ms(ended - started),
            "upstream_ms": _ms(x.answered - started) if x.answered else None},
        "edge": {"id": decision.edge_id or None},
        "route": {"id": decision.route_id or None},
        "backend": {"id": decision.plan.backend_id or None},
        "tunnel": {"id": target.id if isinstance(target, Tunnel) else None},
        "traffic_policy": {"logs": list(logs or [])},
    }


async def observed(answer: Awaitable[bool], sink: TrafficSink, x: Exchange, req: Request,
                   decision: Decision, started: float) -> bool:
    """Await the answer to a request, then queue its event (also when it failed)."""
    try:
        return await answer
    finally:
        sink.emit(HTTP, http_object(x, req, decision, started, time.monotonic()))


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
        self.sink.emit(TCP, {
            "conn": {"client_ip": peer[0], "client_port": peer[1],
                     "server_port": listener.port, "bytes_in": bytes_in,
                     "bytes_out": bytes_out, "start_ts": stamp(started),
                     "duration_ms": _ms(time.time() - started)},
            "edge": {"id": edge.id if edge else None},
            "tunnel": {"id": listener.owner or None}})
