"""Public TCP listeners: one per TCP tunnel's bound address and per TCP edge hostport (with
``--proxy-protocol``, each reads the PROXY header of its trusted load balancers' connections:
``edgeway.proxied``)."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from edgeway import caps, proxied
from edgeway.accept import Acceptor, Peer, open_streams
from edgeway.caps import Door

if TYPE_CHECKING:
    from edgeway.tunnel.registry import Tunnel

# one client's connection, and its address (the PROXY header's, from a trusted load balancer)
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, Peer], Awaitable[None]]
# told of each connection as it ends (listener, peer, socket, start time): traffic events
Closed = Callable[["TcpListener", tuple[str, int], Any, float], None]
# hands an accepted connection (kind, client, listener ref) to the worker holding every one of
# the tunnels it may reach, if one does (``edgeway serve --workers``): whether it was
Offer = Callable[[socket.socket, str, Peer, str, Sequence["Tunnel"]], Awaitable[bool]]
CLOSE_WAIT = 2.0  # seconds close() waits for its connections to end


def client_addr(peer: tuple[str, int] | None) -> str:
    if not peer:
        return "0.0.0.0:0"
    host = peer[0]
    return f"[{host}]:{peer[1]}" if ipaddress.ip_address(host).version == 6 else \
        f"{host}:{peer[1]}"


class TcpListener:
    """A public TCP listener whose connections go to ``handler``; closing it also ends the
    connections it accepted."""

    def __init__(self, host: str, port: int, handler: Handler, owner: str = "",
                 closed: Closed | None = None,
                 offer: Callable[[socket.socket, Peer], Awaitable[bool]] | None = None,
                 tls: Callable[[], ssl.SSLContext | None] | None = None) -> None:
        self.host, self.port, self.owner = host, port, owner  # owner: a TCP tunnel's id
        self._handler, self._closed, self._offer = handler, closed, offer
        # the TLS its clients speak, terminated here (a traffic policy's terminate-tls)
        self._tls = tls
        self._server: Acceptor | None = None
        self._door: Door | None = None
        self._clients: set[asyncio.Task[None]] = set()
        self._closing = False

    async def start(self) -> None:
        """Listen (an OSError as the system gives it: the port is taken, ...)."""
        sock = socket.create_server((self.host, self.port), backlog=1024,
                                    family=socket.AF_INET6 if ":" in self.host
                                    else socket.AF_INET)
        self._door = door = caps.process().door(f"TCP {client_addr((self.host, self.port))}")
        self._server = Acceptor(sock, door, self._accepted, proxied.trust()).start()

    async def _accepted(self, sock: socket.socket, peer: Peer) -> None:
        if self._offer is not None and await self._offer(sock, peer):
            return  # (handed to the worker holding its tunnel)
        await self._streams(sock, peer)

    async def _streams(self, sock: socket.socket, peer: Peer) -> None:
        try:
            reader, writer = await open_streams(sock, self._tls() if self._tls else None)
        except (ConnectionError, OSError):  # (a failed handshake included)
            return
        await self._client(reader, writer, peer)

    async def adopt(self, sock: socket.socket, peer: Peer) -> None:
        """Serve a connection another worker accepted on this port (this one holds its
        tunnel), counted as one accepted here."""
        ticket = self._door.admit(peer) if self._door is not None and not self._closing \
            else None
        if ticket is None:
            sock.close()
            return
        try:
            await self._streams(sock, peer)
        finally:
            ticket.release()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      peer: Peer) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._clients.add(task)
        started = time.time()
        try:
            await self._handler(reader, writer, peer)
        except asyncio.CancelledError:
            if not self._closing:
                raise
            # ended by close(): a normal end (on Python 3.11 a connection task that ends
            # cancelled makes asyncio's streams log an error for it)
        finally:
            self._clients.discard(task)
            if self._closed is not None:
                self._closed(self, peer, writer.get_extra_info("socket"), started)
            with contextlib.suppress(ConnectionError, OSError):
                writer.close()

    async def close(self) -> None:
        """Stop listening and end the connections; each end is reported (``closed``) before
        this returns, so that a server stopping sends their events."""
        self._closing = True
        if self._server is not None:
            self._server.close()
        clients = list(self._clients)
        for task in clients:
            task.cancel()
        if clients:
            await asyncio.wait(clients, timeout=CLOSE_WAIT)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
