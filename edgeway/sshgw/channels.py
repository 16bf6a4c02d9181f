"""How public connections reach an SSH client: for each one, the gateway opens a
``forwarded-tcpip`` channel back to the client on the remote forward its tunnel came from
(the forward's bind address and port, as the client asked or was told), with the public
client's address as the originator; the client connects it to its local service. The
channel is the edge's ``Pipe``: the HTTP edge writes the request to it and reads the answer,
TCP and TLS splices copy bytes both ways, as with an agent's proxy stream (there is no proxy
header: the client learns the public address from the channel's originator).

``SshCarrier`` is the tunnels' ``Opener`` (``tunnel.registry``): it never runs short of
channels (OpenSSH allows thousands per connection), so it is never ``crowded``.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import asyncssh

from edgeway.tunnel.binds import BindRequest
from edgeway.tunnel.pipes import Pipe, UpstreamGone
from edgeway.tunnel.registry import Tunnel

READ_MAX = 1 << 20
WINDOW, MAX_PACKET = 2 << 20, 256 << 10  # what the client may send us on a channel
OPEN_TIMEOUT = 30.0  # for the client to accept a channel (it connects to its service first)
_GONE = (asyncssh.Error, OSError, asyncio.IncompleteReadError)


@dataclass(frozen=True)
class Forward:
    """A remote forward as the client knows it: its bind address and (allocated) port."""
    host: str
    port: int


def _split(client: str) -> tuple[str, int]:
    host, _, port = client.rpartition(":")
    return host.strip("[]"), int(port) if port.isdigit() else 0


class ChannelPipe(Pipe):
    """A ``forwarded-tcpip`` channel to the SSH client, with asyncssh's flow control: reads
    pause the channel's window when the edge does not keep up, writes wait for the client's
    window."""

    def __init__(self, reader: asyncssh.SSHReader[bytes],
                 writer: asyncssh.SSHWriter[bytes]) -> None:
        self.reader, self.writer = reader, writer

    async def read(self) -> bytes:
        try:
            return await self.reader.read(READ_MAX)
        except _GONE as exc:
            raise UpstreamGone(f"the SSH client closed the channel ({exc})") from None

    async def write(self, data: bytes) -> None:
        if self.writer.is_closing():
            raise UpstreamGone("the SSH client closed the channel")
        try:
            self.writer.write(data)
            await self.writer.drain()
        except _GONE as exc:
            raise UpstreamGone(f"the SSH client closed the channel ({exc})") from None

    async def write_eof(self) -> None:
        with contextlib.suppress(*_GONE):
            self.writer.write_eof()

    @property
    def ended(self) -> bool:
        return self.reader.at_eof() or self.writer.is_closing()

    def close(self) -> None:
        with contextlib.suppress(*_GONE):
            self.writer.write_eof()
            self.writer.close()

    def abort(self) -> None:
        with contextlib.suppress(*_GONE):
            self.writer.channel.abort()


class SshCarrier:
    """The tunnels of one SSH connection travel on it (``tunnel.registry.Opener``)."""

    crowded = False

    def __init__(self, conn: asyncssh.SSHServerConnection,
                 opened: Callable[[Tunnel, str], None]) -> None:
        self.conn = conn
        self.closed = asyncio.Event()
        # the remote forward each tunnel serves, by its bind request (known before the tunnel
        # is in the registry, so its first public connection finds it)
        self.routes: dict[int, tuple[BindRequest, Forward]] = {}
        self._opened = opened  # told of each raw (TCP, TLS) connection: for the terminal
        self._pipes: weakref.WeakSet[ChannelPipe] = weakref.WeakSet()  # open channels

    def stop(self) -> None:
        """No more channels, and those open end (the user ended the session: ssh exits once
        every channel it has is closed, kept-alive ones of the edge's pool included)."""
        self.closed.set()
        for pipe in list(self._pipes):
            pipe.abort()

    async def open_pipe(self, tunnel: Tunnel, client: str, proto: str, edge: str,
                        passthrough: bool) -> Pipe:
        route = self.routes.get(id(tunnel.req))
        if route is None or route[0] is not tunnel.req or self.closed.is_set():
            raise UpstreamGone("the SSH client is gone")
        forward = route[1]
        host, port = _split(client)
        try:
            async with asyncio.timeout(OPEN_TIMEOUT):
                reader, writer = await self.conn.open_connection(
                    forward.host, forward.port, host, port, window=WINDOW,
                    max_pktsize=MAX_PACKET)
        except TimeoutError:
            raise UpstreamGone(f"the SSH client did not open the channel within "
                               f"{OPEN_TIMEOUT:g} s") from None
        except asyncssh.ChannelOpenError as exc:
            raise UpstreamGone(f"the SSH client could not reach its local service "
                               f"({exc.reason})") from None
        except _GONE as exc:
            raise UpstreamGone(f"the SSH client is gone ({exc})") from None
        if proto != "http" and proto != "https":
            self._opened(tunnel, client)
        pipe = ChannelPipe(reader, writer)
        self._pipes.add(pipe)
        return pipe
