"""Proxy streams: for every public connection the server opens a stream with a proxy header
naming the tunnel; the agent dials the tunnel's local address and splices both ways (HTTP
tunnels through the tap of ``edgeway.agent.inspect``: captures, the Host header, request
metrics), counting connections for the tunnel's metrics. A local service that cannot be
reached gets an HTTP client a 502 page saying why (the edge's kind of page, from
``edgeway.pages``); a TCP or TLS client is reset."""

from __future__ import annotations

import asyncio
import json
import ssl
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from edgeway.agent.captures import Exchange, Store
from edgeway.agent.dial import LOCAL_TLS
from edgeway.agent.inspect import Tap, splice_tapped
from edgeway.agent.metrics import TunnelMetrics
from edgeway.agent.tunnelconfig import TunnelConfig
from edgeway.pages import http1, page
from edgeway.tunnel import rpc
from edgeway.tunnel.muxado.stream import MuxStream
from edgeway.tunnel.pipes import StreamPipe, splice

DIAL_TIMEOUT = 10.0  # seconds to reach the local service


@dataclass
class LocalTunnel:
    config: TunnelConfig
    from_config: bool
    id: str = ""
    url: str = ""
    proto: str = ""
    error: str = ""  # why the server refused the last bind ("" once bound)
    bound: bool = False  # the last bind succeeded (a labeled tunnel has no url to show it)
    metrics: TunnelMetrics = field(init=False)

    def __post_init__(self) -> None:
        self.metrics = TunnelMetrics(http=self.config.proto == "http")

    @property
    def requests(self) -> int:
        """Proxied connections so far."""
        return self.metrics.conns.meter.count


async def read_header(stream: MuxStream) -> dict[str, Any]:
    (size,) = struct.unpack("<q", await stream.readexactly(8))
    if not 0 < size <= 1 << 16:
        raise rpc.RPCError("bad proxy header length")
    header: dict[str, Any] = rpc.folded(json.loads(await stream.readexactly(size)))
    return header


async def _unreachable(stream: MuxStream, tunnel: LocalTunnel, exc: BaseException) -> None:
    """The local service could not be reached: an HTTP client gets the same kind of page as
    the edge's (``ERR_EDGEWAY_8012``, as ngrok's ERR_NGROK_8012), a TCP or TLS client a
    reset."""
    if tunnel.config.proto != "http":
        stream.reset()
        return
    why = str(exc) or type(exc).__name__
    if isinstance(exc, TimeoutError):
        why = f"no connection within {DIAL_TIMEOUT:g} s"
    answer = page(502, "Bad gateway", f"The tunnel reached its Edgeway agent, but the agent "
                  f"could not reach the local service at {tunnel.config.addr.url()}: {why}.",
                  8012)
    await stream.write(http1(answer), eof=True)


async def serve(stream: MuxStream, tunnel: LocalTunnel, client: str, store: Store | None,
                seen: Callable[[tuple[str, Exchange]], None],
                changed: Callable[[], None]) -> None:
    """One proxied connection of ``tunnel`` from ``client``, until both sides are done;
    ``seen`` hears of each HTTP exchange as (the tunnel's name, it)."""
    metrics, c = tunnel.metrics, tunnel.config
    metrics.opened()
    changed()
    began = time.monotonic_ns()
    try:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(
                c.addr.host, c.addr.port, ssl=LOCAL_TLS if c.addr.scheme == "https" else None),
                DIAL_TIMEOUT)
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            await _unreachable(stream, tunnel, exc)
            return
        if c.proto == "http":
            name = c.name

            def done(ex: Exchange) -> None:
                metrics.request(ex.duration)
                seen((name, ex))

            tap = Tap(store if c.inspect else None, c.name, client, c.rewritten_host(), done)
            await splice_tapped(reader, writer, stream, tap)
        else:
            await splice(reader, writer, StreamPipe(stream))
    finally:
        metrics.closed(time.monotonic_ns() - began)
        changed()
