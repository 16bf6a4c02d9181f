"""TCP edges: a public listener for each port of the routing snapshot's TCP edges, kept in
step with it (``sync``), each connection forwarded raw to what the edge's backend picks, or
handed to the worker holding every tunnel it may reach (``offer``). Also the raw forwarding
the TLS port's passthrough shares (``forward``)."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Awaitable, Callable
from functools import partial

import structlog

from edgeway.accept import Peer
from edgeway.edge import connections
from edgeway.edge.backends import Static, Target
from edgeway.edge.handover import behind
from edgeway.edge.hooks import Local
from edgeway.edge.pages import Fixed
from edgeway.edge.router import EdgeRouter
from edgeway.edge.snapshot import Cloud, Edge, Snapshot
from edgeway.edge.terminating import Terminator
from edgeway.tunnel.muxado.events import StreamError
from edgeway.tunnel.muxado.stream import StreamClosed
from edgeway.tunnel.pipes import Pipe, SocketPipe, UpstreamGone, splice
from edgeway.tunnel.registry import Tunnel
from edgeway.tunnel.tcp import Closed, Offer, TcpListener, client_addr

log = structlog.get_logger()


def edge_target(router: EdgeRouter, snap: Snapshot, edge: Edge, peer: tuple[str, int],
                local: Local) -> Target | None:
    """Where a connection to a TCP edge goes: refused (None) by the IP restriction, the
    traffic policy's on_tcp_connect or a module this edge cannot enforce; else the internal
    endpoint the policy forwards it to, or what the edge's backend picks."""
    verdict = connections.decide(router, edge.plan, *peer, local)
    if verdict is True:
        return router.target(snap, edge.plan)
    return verdict or None


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
                 refused: Callable[[Peer], Awaitable[bool]], terminator: Terminator) -> None:
        self.router, self.host, self.refused = router, host, refused
        self.terminator = terminator
        self.listeners: dict[int, TcpListener] = {}
        self.closed: Closed | None = None  # set by the server: each connection's end
        self.offer: Offer | None = None  # set by ``edgeway serve --workers``

    async def sync(self) -> None:
        snap = self.router.snapshot
        wanted = set(snap.tcp) | set(snap.tcp_cloud)
        for port in set(self.listeners) - wanted:
            await self.listeners.pop(port).close()
        for port in wanted - set(self.listeners):
            listener = TcpListener(self.host, port, partial(self._client, port),
                                   closed=self.closed, offer=partial(self._offer, port),
                                   tls=partial(self._tls, port))
            try:
                await listener.start()
            except OSError as exc:
                log.warning("tcp_edge_listen_failed", port=port, error=exc.strerror)
                continue
            self.listeners[port] = listener

    def _tls(self, port: int) -> ssl.SSLContext | None:
        snap = self.router.snapshot
        return self.terminator.listener(snap.tcp_cloud.get(port) or snap.tcp.get(port))

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
        edge = snap.tcp.get(port)  # (a cloud endpoint's reach is decided per connection)
        reach = behind(snap, self.router.registry, edge) if edge is not None else None
        return self.offer is not None and bool(reach) \
            and await self.offer(sock, "tcp_edge", peer, str(port), reach or ())

    async def _client(self, port: int, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter, peer: Peer) -> None:
        snap = self.router.snapshot
        local = self.router.local(writer.get_extra_info("sockname"))
        cloud = snap.tcp_cloud.get(port)
        if cloud is not None:
            if cloud.hostport not in snap.banned:  # (taken down after an abuse report)
                await self._cloud(cloud.pick(), reader, writer, peer, local)
            return
        edge = snap.tcp.get(port)
        if edge is None or await self.refused(peer) \
                or any(hp in snap.banned for hp in edge.doc.get("hostports") or ()):
            return
        target = edge_target(self.router, snap, edge, peer, local)
        if target is None or isinstance(target, Fixed):
            return
        internal = isinstance(target, Tunnel) and bool(target.inner)
        await forward(reader, writer, peer, target, "tcp", "" if internal else "tcp", False)

    async def _cloud(self, cloud: Cloud, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter, peer: Peer, local: Local) -> None:
        """A TCP cloud endpoint's connection: its traffic policy closes it or forwards it to
        an internal TCP endpoint; one it does neither with is closed too (nothing else
        serves the address)."""
        verdict = connections.decide(self.router, cloud.plan, *peer, local)
        if isinstance(verdict, Tunnel) and not await self.refused(peer):
            await forward(reader, writer, peer, verdict, "tcp", "", False)
        elif verdict is True:
            log.info("tcp_cloud_endpoint_unanswered", endpoint=cloud.id, client=peer[0])
