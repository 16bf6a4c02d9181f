"""The live tunnels of this node, by id, by public host name and by labels, and how a public
connection becomes a proxy stream to the agent that bound a tunnel."""

from __future__ import annotations

import asyncio
import itertools
import json
import struct
from dataclasses import dataclass, field

from edgeway.tunnel.binds import BindRequest
from edgeway.tunnel.muxado.aio import MuxConnection
from edgeway.tunnel.muxado.events import StreamError
from edgeway.tunnel.muxado.stream import MuxStream
from edgeway.tunnel.rpc import StreamType

STREAM_WAIT = 30.0  # for a stream of an agent session whose streams are all in use


class Busy(StreamError):
    """All the streams an agent session may have are in use, and none became free in time."""


# ProxyHeader EdgeType: a string, "1" TCP, "2" TLS, "3" HTTPS edges; "" for agent endpoints
EDGE_TYPES = {"": "", "tcp": "1", "tls": "2", "https": "3"}


def proxy_preamble(tunnel_id: str, client: str, proto: str, edge: str = "",
                   passthrough: bool = False) -> bytes:
    header = json.dumps({"Id": tunnel_id, "ClientAddr": client, "Proto": proto,
                         "EdgeType": EDGE_TYPES[edge], "PassthroughTLS": passthrough}).encode()
    return struct.pack(">I", StreamType.PROXY) + struct.pack("<q", len(header)) + header


@dataclass(eq=False)
class Tunnel:
    id: str
    conn: MuxConnection
    req: BindRequest
    url: str = ""
    host: str = ""  # http(s) and tls: the public host name
    port: int = 0  # tcp: the public port
    credential: str = ""
    session_id: str = ""
    endpoint_id: str = ""

    @property
    def proto(self) -> str:
        return self.req.proto

    @property
    def labels(self) -> dict[str, str]:
        return self.req.labels

    @property
    def alive(self) -> bool:
        return not self.conn.closed.is_set()

    async def open(self, client: str, proto: str, edge: str = "",
                   passthrough: bool = False, wait: float = STREAM_WAIT) -> MuxStream:
        """A proxy stream for one public connection (StreamError/StreamClosed if the agent is
        gone; ``Busy``, a StreamError, if none of the session's streams became free within
        ``wait`` seconds: see ``MuxConnection.open_stream``)."""
        try:
            async with asyncio.timeout(wait):
                stream = await self.conn.open_stream()
        except TimeoutError:
            raise Busy(f"none of the agent session's {self.conn.max_open} streams became "
                       f"free within {wait:g} s") from None
        await stream.write(proxy_preamble(self.id, client, proto, edge, passthrough))
        return stream


@dataclass
class Registry:
    by_id: dict[str, Tunnel] = field(default_factory=dict)
    by_host: dict[str, list[Tunnel]] = field(default_factory=dict)
    labeled: list[Tunnel] = field(default_factory=list)
    version: int = 0  # bumped on every change; the router's caches key on it
    _turn: itertools.count[int] = field(default_factory=itertools.count)

    def add(self, tunnel: Tunnel) -> None:
        self.by_id[tunnel.id] = tunnel
        if tunnel.host:
            self.by_host.setdefault(tunnel.host, []).append(tunnel)
        if tunnel.labels:
            self.labeled.append(tunnel)
        self.version += 1

    def remove(self, tunnel: Tunnel) -> None:
        if self.by_id.get(tunnel.id) is tunnel:
            del self.by_id[tunnel.id]
        peers = self.by_host.get(tunnel.host)
        if peers is not None and tunnel in peers:
            peers.remove(tunnel)
            if not peers:
                del self.by_host[tunnel.host]
        if tunnel in self.labeled:
            self.labeled.remove(tunnel)
        self.version += 1

    def for_host(self, host: str) -> list[Tunnel]:
        """The tunnels bound to ``host``, or, when none are, to the wildcard one label up
        (``*.site.example.com`` serves ``a.site.example.com``): the more specific name wins."""
        exact = self.by_host.get(host)
        if exact or "." not in host:
            return exact or []
        return self.by_host.get("*." + host.split(".", 1)[1], [])

    def with_labels(self, labels: dict[str, str]) -> list[Tunnel]:
        """Live labeled tunnels carrying every one of ``labels``."""
        return [t for t in self.labeled if t.alive
                and all(t.labels.get(k) == v for k, v in labels.items())]

    def pick(self, tunnels: list[Tunnel]) -> Tunnel | None:
        """Round robin over the live ones."""
        live = [t for t in tunnels if t.alive]
        return live[next(self._turn) % len(live)] if live else None
