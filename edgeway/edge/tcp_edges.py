"""TCP edges: a public listener for each port of the routing snapshot's TCP edges, kept in
step with it (``sync``), each connection forwarded raw to what the edge's backend picks, or
handed to the worker holding every tunnel it may reach (``offer``). Also the raw forwarding
the TLS port's passthrough shares (``forward``)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from functools import partial

import structlog

from edgeway.accept import Peer
from edgeway.edge.backends import Static, Target
from edgeway.edge.handover import behind
from edgeway.edge.pages import Fixed
from edgeway.edge.router import EdgeRouter
from edgeway.edge.snapshot import Edge
from edgeway.tunnel.muxado.events import StreamError
from edgeway.tunnel.muxado.stream import StreamClosed
from edgeway.tunnel.pipes import Pipe, SocketPipe, UpstreamGone, splice
from edgeway.tunnel.registry import Tunnel
from edgeway.tunnel.tcp import Closed, Offer, TcpListener, client_addr

log = structlog.get_logger()


def admits(edge: Edge, peer: tuple[str, int]) -> bool:
    """TCP and TLS edges: the IP restriction, the traffic policy's on_tcp_connect, and no
    module this edge cannot enforce."""
    return edge.plan.admits(*peer)


async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                  peer: tuple[str, int], target: Target | None, proto: str, edge: str,
                  passthrough: bool) -> None:
    """Splice a raw public connection into ``target`` (closed when there is none)."""
    pipe: Pipe
    try:
        if isinstance(target, Tunnel):
            pipe = await target.open(client_addr(peer), proto, edge, passthrough)
        elif isinstance(target, Static):
            pipe = await SocketPipe.dial(target.host, target.port, target.tls)
        else:  # nothing live, or an HTTP response backend on a raw edge: closed
            writer.close()
            return
    except (StreamClosed, StreamError, UpstreamGone):
        writer.close()
        return
    await splice(reader, writer, pipe)


class TcpEdges:
    def __init__(self, router: EdgeRouter, host: str,
                 refused: Callable[[Peer], Awaitable[bool]]) -> None:
        self.router, self.host, self.refused = router, host, refused
        self.listeners: dict[int, TcpListener] = {}
        self.closed: Closed | None = None  # set by the server: each connection's end
        self.offer: Offer | None = None  # set by ``edgeway serve --workers``

    async def sync(self) -> None:
        wanted = set(self.router.snapshot.tcp)
        for port in set(self.listeners) - wanted:
            await self.listeners.pop(port).close()
        for port in wanted - set(self.listeners):
            listener = TcpListener(self.host, port, partial(self._client, port),
                                   closed=self.closed, offer=partial(self._offer, port))
            try:
                await listener.start()
            except OSError as exc:
                log.warning("tcp_edge_listen_failed", port=port, error=exc.strerror)
                continue
            self.listeners[port] = listener

    async def take(self, sock: socket.socket, ref: str, peer: Peer) -> None:
        """A connection another worker accepted on the edge port ``ref``."""
        listener = self.listeners.get(int(ref)) if ref.isdigit() else None
        if listener is None:
            sock.close()
        else:
            await listener.adopt(sock, peer)

    async def close(self) -> None:
        for listener in self.listeners.values():
            await listener.close()

    async def _offer(self, port: int, sock: socket.socket, peer: Peer) -> bool:
        snap = self.router.snapshot
        edge = snap.tcp.get(port)
        reach = behind(snap, self.router.registry, edge) if edge is not None else None
        return self.offer is not None and bool(reach) \
            and await self.offer(sock, "tcp_edge", peer, str(port), reach or ())

    async def _client(self, port: int, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter, peer: Peer) -> None:
        snap = self.router.snapshot
        edge = snap.tcp.get(port)
        if edge is None or not admits(edge, peer) or await self.refused(peer) \
                or any(hp in snap.banned for hp in edge.doc.get("hostports") or ()):
            return
        target = self.router.target(snap, edge.plan)
        if isinstance(target, Fixed):
            return
        await forward(reader, writer, peer, target, "tcp", "tcp", False)
