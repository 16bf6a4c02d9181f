"""The accept loop the stream listeners share (public HTTP and HTTPS/TLS, TCP edges and TCP
tunnels, the tunnel listener, DNS over TCP): it accepts on a listening socket, asks the
listener's door (``edgeway.caps``), hands each admitted connection to its handler in a task
of its own and closes a refused one at once. ``close`` and ``wait_closed`` are those of
``asyncio.Server``: the listening stops, the connections are left to their handlers.

A listener given a ``Trust`` (the public ones, with ``--proxy-protocol``) reads the PROXY
header of each connection from a trusted load balancer before its handler sees it
(``edgeway.proxied``), and the handler gets the client's address the header gives as the
peer: every handler takes the peer from here, never from the socket."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import Awaitable, Callable

import structlog

from edgeway import proxied
from edgeway.caps import Door, Ticket
from edgeway.proxied import Trust
from edgeway.proxy_protocol import Refused

log = structlog.get_logger()
Peer = tuple[str, int]
SocketHandler = Callable[[socket.socket, Peer], Awaitable[None]]
StreamHandler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, Peer], Awaitable[None]]
BACKOFF = 0.05  # seconds between accepts while the process is out of descriptors


async def open_streams(sock: socket.socket, context: ssl.SSLContext | None = None,
                       handshake_timeout: float | None = None
                       ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Streams over an accepted socket (TLS with ``context``: after the handshake); the
    socket belongs to them from here, and is closed if this fails."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=65536)
    protocol = asyncio.StreamReaderProtocol(reader)
    try:
        transport, _ = await loop.connect_accepted_socket(
            lambda: protocol, sock, ssl=context,
            ssl_handshake_timeout=(handshake_timeout or 10.0) if context else None)
    except BaseException:
        if sock.fileno() >= 0:  # (not taken by a transport yet)
            sock.close()
        raise
    return reader, asyncio.StreamWriter(transport, protocol, reader, loop)


class Acceptor:
    def __init__(self, sock: socket.socket, door: Door, handler: SocketHandler,
                 trust: Trust | None = None) -> None:
        self.sock, self.door, self.handler = sock, door, handler
        self.trust = trust  # the load balancers whose PROXY headers are read (None: none)
        self._accepting: asyncio.Task[None] | None = None
        self._clients: set[asyncio.Task[None]] = set()

    @classmethod
    def streams(cls, sock: socket.socket, door: Door, handler: StreamHandler,
                context: ssl.SSLContext | None = None,
                handshake_timeout: float | None = None, trust: Trust | None = None
                ) -> Acceptor:
        """An acceptor whose handler gets streams, as ``asyncio.start_server``'s does (over
        TLS with ``context``), and the peer; the connection is closed when the handler
        returns."""
        async def run(conn: socket.socket, peer: Peer) -> None:
            try:
                reader, writer = await open_streams(conn, context, handshake_timeout)
            except (ConnectionError, OSError, ssl.SSLError, TimeoutError):
                return  # (a failed handshake: nothing to serve)
            try:
                await handler(reader, writer, peer)
            finally:
                with contextlib.suppress(ConnectionError, OSError, RuntimeError):
                    writer.close()
        return cls(sock, door, run, trust)

    def start(self) -> Acceptor:
        self.sock.setblocking(False)
        self._accepting = asyncio.create_task(self._accept())
        return self

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, addr = await loop.sock_accept(self.sock)
            except OSError:
                if self.sock.fileno() < 0:
                    return
                await asyncio.sleep(BACKOFF)  # out of descriptors: back off, keep serving
                continue
            if not isinstance(addr, tuple):  # a Unix socket's client (the node link's)
                addr = ("unix", 0)
            proxy = self.trust is not None and self.trust.trusts(addr[0])
            ticket = self.door.admit(addr if addr[0] != "unix" else None,
                                     by_address=not proxy)  # (a proxy's client: later)
            if ticket is None:
                self.door.refuse(conn)
                continue
            conn.setblocking(False)
            with contextlib.suppress(OSError):
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            task = asyncio.create_task(self._serve(conn, (addr[0], addr[1]), ticket, proxy))
            self._clients.add(task)
            task.add_done_callback(self._clients.discard)

    async def _serve(self, conn: socket.socket, peer: Peer, ticket: Ticket,
                     proxy: bool) -> None:
        try:
            if proxy:  # from a trusted load balancer: the client is its header's
                client = await self._client(conn, peer, ticket)
                if client is None:
                    return
                peer = client
            await self.handler(conn, peer)
        except Exception:  # one connection's failure is logged, never the listener's end
            log.exception("connection_failed", listener=self.door.listener)
        finally:
            ticket.release()

    async def _client(self, conn: socket.socket, peer: Peer, ticket: Ticket) -> Peer | None:
        """The client a trusted load balancer's connection is for, counted under its address;
        None: closed (no valid header in time, or that client is at its cap)."""
        assert self.trust is not None
        try:
            header = await proxied.read_header(conn, self.trust.timeout)
        except BaseException:  # (cancelled: the server stops; the socket is still ours)
            conn.close()
            raise
        if isinstance(header, Refused):
            proxied.refused(self.door.listener, peer, header)
            conn.close()
            return None
        client = header.source or peer  # (none: a health check, from the balancer itself)
        if not ticket.claim(client):
            self.door.refuse(conn)
            return None
        return client

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        """The listening socket (as ``asyncio.Server.sockets``)."""
        return (self.sock,)

    def close(self) -> None:
        if self._accepting is not None:
            self._accepting.cancel()
        self.sock.close()

    async def wait_closed(self) -> None:
        if self._accepting is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._accepting
