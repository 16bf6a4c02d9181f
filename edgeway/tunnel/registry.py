"""The live tunnels of this node, by id, by public host name and by labels, and how a public
connection becomes a pipe to whoever holds a tunnel: a proxy stream of the agent's muxado
session (the proxy header, then the bytes), or what another way in opens itself (``Opener``:
the SSH gateway's ``forwarded-tcpip`` channels). The edge sees the same ``Pipe`` either way."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from edgeway.catalog.checks import internal
from edgeway.tunnel.binds import BindRequest
from edgeway.tunnel.muxado.aio import MuxConnection
from edgeway.tunnel.muxado.events import StreamError
from edgeway.tunnel.pipes import Pipe, StreamPipe
from edgeway.tunnel.rpc import StreamType

_BINDS = itertools.count()
STREAM_WAIT = 30.0  # for a stream of an agent session whose streams are all in use
MOVE_WAIT = 15.0  # seconds requests wait for a tunnel whose agent moves to another node


class Busy(StreamError):
    """All the streams an agent session may have are in use, and none became free in time."""


# ProxyHeader EdgeType: a string, "1" TCP, "2" TLS, "3" HTTPS edges; "" for agent endpoints
EDGE_TYPES = {"": "", "tcp": "1", "tls": "2", "https": "3"}


def proxy_preamble(tunnel_id: str, client: str, proto: str, edge: str = "",
                   passthrough: bool = False) -> bytes:
    header = json.dumps({"Id": tunnel_id, "ClientAddr": client, "Proto": proto,
                         "EdgeType": EDGE_TYPES[edge], "PassthroughTLS": passthrough}).encode()
    return struct.pack(">I", StreamType.PROXY) + struct.pack("<q", len(header)) + header


class Carrier(Protocol):
    """What a tunnel's public connections travel on: its end is the tunnel's end; while
    ``crowded``, pipes wait for room (idle pooled ones of it are closed first)."""

    @property
    def closed(self) -> asyncio.Event: ...

    @property
    def crowded(self) -> bool: ...


class Opener(Carrier, Protocol):
    """A carrier that is not an agent's muxado session (the SSH gateway's connection): it
    opens a pipe of its own for each public connection."""

    async def open_pipe(self, tunnel: Tunnel, client: str, proto: str, edge: str,
                        passthrough: bool) -> Pipe: ...


@dataclass(eq=False)
class Tunnel:
    id: str
    conn: MuxConnection | Opener
    req: BindRequest
    url: str = ""
    host: str = ""  # http(s) and tls: the public host name
    port: int = 0  # tcp: the public port
    credential: str = ""
    session_id: str = ""
    endpoint_id: str = ""
    # told (method, target, status) of each HTTP response the edge relays from this tunnel
    # (the SSH gateway's request log); None for agents' tunnels
    observer: Callable[[bytes, bytes, int], None] | None = None
    # this bind of the tunnel (a re-bind, here or through another node, is another): idle
    # upstreams are kept by it, never handed to the next bind of the same id
    key: str = field(init=False)

    def __post_init__(self) -> None:
        self.key = f"{self.id}#{next(_BINDS)}"

    @property
    def proto(self) -> str:
        return self.req.proto

    @property
    def labels(self) -> dict[str, str]:
        return self.req.labels

    @property
    def inner(self) -> str:
        """An internal TCP endpoint's address (``db.internal:5432``, no listener serves it);
        "" for any other tunnel."""
        if self.proto != "tcp" or self.port or not self.url.startswith("tcp://"):
            return ""
        addr = self.url[6:]
        return addr if internal(addr.rpartition(":")[0]) else ""

    @property
    def alive(self) -> bool:
        return not self.conn.closed.is_set()

    async def open(self, client: str, proto: str, edge: str = "",
                   passthrough: bool = False, wait: float = STREAM_WAIT) -> Pipe:
        """A pipe for one public connection: an agent's proxy stream (StreamError/StreamClosed
        if the agent is gone; ``Busy``, a StreamError, if none of the session's streams became
        free within ``wait`` seconds: see ``MuxConnection.open_stream``), or what an
        ``Opener`` opens (``UpstreamGone`` when it cannot)."""
        if not isinstance(self.conn, MuxConnection):
            return await self.conn.open_pipe(self, client, proto, edge, passthrough)
        try:
            async with asyncio.timeout(wait):
                stream = await self.conn.open_stream()
        except TimeoutError:
            raise Busy(f"none of the agent session's {self.conn.max_open} streams became "
                       f"free within {wait:g} s") from None
        await stream.write(proxy_preamble(self.id, client, proto, edge, passthrough))
        return StreamPipe(stream)


@dataclass
class Registry:
    """The live tunnels, and which went away only to come back (their agent moves to another
    node of a cluster: ``moved``): requests for those may wait for them (``until_back``)."""

    by_id: dict[str, Tunnel] = field(default_factory=dict)
    by_host: dict[str, list[Tunnel]] = field(default_factory=dict)
    # internal TCP endpoints (``db.internal:5432``) -> their tunnels: forward-internal's only
    by_inner: dict[str, list[Tunnel]] = field(default_factory=dict)
    labeled: list[Tunnel] = field(default_factory=list)
    version: int = 0  # bumped on every change; the router's caches key on it
    # the binds (``Tunnel.key``) of HTTPS tunnels that require client certificates: while
    # there are none, a request needs no look-up for them
    mutual: set[str] = field(default_factory=set)
    _turn: itertools.count[int] = field(default_factory=itertools.count)
    _moving: dict[str, float] = field(default_factory=dict)  # host -> until (loop time)
    _moving_tls: dict[str, float] = field(default_factory=dict)  # (its TLS tunnels')
    _labels_moving: float = 0.0  # a labeled tunnel is moving until then
    _change: asyncio.Event | None = None

    def _changed(self) -> None:
        self.version += 1
        if self._change is not None:
            self._change.set()
            self._change = None

    def add(self, tunnel: Tunnel) -> None:
        self.by_id[tunnel.id] = tunnel
        if tunnel.host:
            self.by_host.setdefault(tunnel.host, []).append(tunnel)
            self._moving.pop(tunnel.host, None)
            if tunnel.proto == "tls":
                self._moving_tls.pop(tunnel.host, None)
        if inner := tunnel.inner:
            self.by_inner.setdefault(inner, []).append(tunnel)
        if tunnel.labels:
            self.labeled.append(tunnel)
        if tunnel.proto == "https" and tunnel.req.client_cas:
            self.mutual.add(tunnel.key)
        self._changed()

    def moved(self, tunnel: Tunnel, seconds: float) -> None:
        """``tunnel`` went away but its agent is expected back within ``seconds`` (its node
        left or died: the agent reconnects to another)."""
        until = asyncio.get_running_loop().time() + seconds
        if tunnel.host:
            self._moving[tunnel.host] = until
            if tunnel.proto == "tls":
                self._moving_tls[tunnel.host] = until
        if tunnel.labels:
            self._labels_moving = max(self._labels_moving, until)

    def until_back(self, host: str) -> float:
        """Until when a request for ``host`` (or for a labeled backend: "") may wait for a
        moving tunnel (loop time; 0: nothing is moving)."""
        if not host:
            return self._labels_moving
        return max(_expected(self._moving, host), self._labels_moving)

    async def tls_back(self, host: str) -> list[Tunnel]:
        """The TLS tunnels bound to ``host``; when none are but one is moving to another node,
        those bound again within the time it is expected back (a TLS connection waits for
        its tunnel as an HTTP request does)."""
        loop = asyncio.get_running_loop()
        while not (bound := [t for t in self.for_host(host) if t.proto == "tls"]):
            until = _expected(self._moving_tls, host)
            if until <= loop.time():
                break
            await self.change(until - loop.time())
        return bound

    async def change(self, timeout: float) -> None:
        """Until the next change (or ``timeout`` seconds)."""
        if self._change is None:
            self._change = asyncio.Event()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._change.wait()

    def remove(self, tunnel: Tunnel) -> None:
        if self.by_id.get(tunnel.id) is tunnel:
            del self.by_id[tunnel.id]
        peers = self.by_host.get(tunnel.host)
        if peers is not None and tunnel in peers:
            peers.remove(tunnel)
            if not peers:
                del self.by_host[tunnel.host]
        inner = self.by_inner.get(tunnel.inner) if tunnel.inner else None
        if inner is not None and tunnel in inner:
            inner.remove(tunnel)
            if not inner:
                del self.by_inner[tunnel.inner]
        if tunnel in self.labeled:
            self.labeled.remove(tunnel)
        self.mutual.discard(tunnel.key)
        self._changed()

    def for_host(self, host: str) -> list[Tunnel]:
        """The tunnels bound to ``host``, or, when none are, to the wildcard one label up
        (``*.site.example.com`` serves ``a.site.example.com``): the more specific name wins.
        None for an internal name: those are ``internal``'s, never the public listeners'."""
        if internal(host):
            return []
        exact = self.by_host.get(host)
        if exact or "." not in host:
            return exact or []
        return self.by_host.get("*." + host.split(".", 1)[1], [])

    def internal(self, host: str, scheme: str) -> Tunnel | None:
        """A live tunnel of the internal endpoint ``host`` (``api.internal``), over ``scheme``
        when one is (round robin), for a traffic policy's forward-internal."""
        tunnels = self.by_host.get(host.rstrip(".").lower(), []) if internal(host) else []
        same = [t for t in tunnels if t.proto == scheme and t.alive]
        return self.pick(same or tunnels)

    def internal_tcp(self, addr: str) -> Tunnel | None:
        """A live tunnel of the internal TCP endpoint ``addr`` (``db.internal:5432``; round
        robin), for a traffic policy's forward-internal on a TCP connection."""
        return self.pick(self.by_inner.get(addr, []))

    def with_labels(self, labels: dict[str, str]) -> list[Tunnel]:
        """Live labeled tunnels carrying every one of ``labels``."""
        return [t for t in self.labeled if t.alive
                and all(t.labels.get(k) == v for k, v in labels.items())]

    def pick(self, tunnels: list[Tunnel]) -> Tunnel | None:
        """Round robin over the live ones."""
        live = [t for t in tunnels if t.alive]
        return live[next(self._turn) % len(live)] if live else None


def _expected(moving: dict[str, float], host: str) -> float:
    """Until when a tunnel of ``host`` (or of the wildcard one label up) is expected back."""
    parent = "*." + host.split(".", 1)[1] if "." in host else ""
    return max(moving.get(host, 0.0), moving.get(parent, 0.0))
