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

from edgeway.sshgw import wire
from edgeway.tunnel.binds import BindRequest
from edgeway.tunnel.pipes import READ_MAX, Pipe, UpstreamGone
from edgeway.tunnel.registry import Tunnel

WINDOW, MAX_PACKET = 2 << 20, 256 << 10  # what the client may send us on a channel
OPEN_TIMEOUT = 30.0  # for the client to accept a channel (it connects to its service first)
_GONE = (asyncssh.Error, OSError)


@dataclass(frozen=True)
class Forward:
    """A remote forward as the client knows it: its bind address and (allocated) port."""
    host: str
    port: int


def _split(client: str) -> tuple[str, int]:
    host, _, port = client.rpartition(":")
    return host.strip("[]"), int(port) if port.isdigit() else 0


class ChannelPipe(Pipe, asyncssh.SSHTCPSession[bytes]):
    """A ``forwarded-tcpip`` channel to the SSH client, as the edge's ``Pipe`` and as the
    channel's session: asyncssh's callbacks put what arrives in one buffer and wake the one
    reader, without the locks and per-read bookkeeping of its stream session. Flow control
    stays asyncssh's: while ``READ_MAX`` bytes wait unread, the channel's reading is paused
    (its window is not reopened, so the client stops sending); a write waits while asyncssh
    holds more than its high-water mark for the client's window."""

    def __init__(self) -> None:
        self.chan: asyncssh.SSHTCPChannel[bytes] | None = None
        self._held: list[bytes] = []
        self._size = 0
        self._eof = False  # the client sent its EOF, or the channel closed
        self._error: Exception | None = None  # how the channel was lost, if not cleanly
        self._lost = False
        self._paused = False  # reading paused: READ_MAX bytes wait unread
        self._full = False  # writing paused by asyncssh
        self._reader: asyncio.Future[None] | None = None
        self._writer: asyncio.Future[None] | None = None
        self._fin = False  # the client sent its EOF (not just a lost channel)
        # ``deliver``: what arrives goes to ``_on_data`` (the edge's callback path), the
        # end to ``_on_end``
        self._on_data: Callable[[bytes], None] | None = None
        self._on_end: Callable[[], None] | None = None

    # -- the channel's session (asyncssh calls these) --------------------------------------

    def connection_made(self, chan: asyncssh.SSHTCPChannel[bytes]) -> None:
        self.chan = chan
        wire.quiet(chan)

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        if self._on_data is not None:
            self._on_data(data)
            return
        self._held.append(data)
        self._size += len(data)
        if self._size >= READ_MAX and not self._paused and self.chan is not None:
            self._paused = True
            self.chan.pause_reading()
        _wake(self._reader)

    def eof_received(self) -> bool:
        self._eof = self._fin = True
        _wake(self._reader)
        self._end()
        return True  # (half-open: the edge ends its side when its exchange is over)

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof = self._lost = True
        self._error = exc
        _wake(self._reader)
        _wake(self._writer)
        self._end()

    def pause_writing(self) -> None:
        self._full = True

    def resume_writing(self) -> None:
        self._full = False
        _wake(self._writer)

    # -- the edge's pipe -------------------------------------------------------------------

    def delivering(self) -> ChannelPipe:
        return self

    def deliver(self, on_data: Callable[[bytes], None], on_end: Callable[[], None]) -> None:
        """From now, what arrives goes to ``on_data`` (what waited first), the channel's end
        to ``on_end``, once (``tunnel.pipes.Delivering``). The window is asyncssh's: it
        reopens as each piece is handed on, so ``taken`` has nothing to do; while held,
        reading pauses at ``READ_MAX`` as for ``read``."""
        self._on_data, self._on_end = on_data, on_end
        while self._held and self._on_data is on_data:
            data = self._held.pop(0)
            self._size -= len(data)
            on_data(data)
        if self._paused and not self._held and self.chan is not None:
            self._paused = False
            self.chan.resume_reading()
        if self._on_data is on_data and self._eof:
            self._end()

    def hold(self) -> None:
        self._on_data = self._on_end = None

    def taken(self, n: int) -> None:
        return None

    @property
    def broken(self) -> bool:
        return self._error is not None or (self._lost and not self._fin)

    def _end(self) -> None:
        on_end = self._on_end
        self._on_data = self._on_end = None
        if on_end is not None:
            on_end()

    async def read(self) -> bytes:
        while not self._held:
            if self._eof:
                if self._error is not None:
                    raise UpstreamGone(f"the SSH client closed the channel ({self._error})")
                return b""
            self._reader = asyncio.get_running_loop().create_future()
            try:
                await self._reader
            finally:
                self._reader = None
        held = self._held
        data = held[0] if len(held) == 1 else b"".join(held)
        self._held, self._size = [], 0
        if self._paused and self.chan is not None:
            self._paused = False
            self.chan.resume_reading()
        return data

    def write_nowait(self, data: bytes) -> bool:
        if self._full or self.chan is None:
            return False
        self._send(data)
        return True

    async def write(self, data: bytes) -> None:
        self._send(data)
        while self._full and not self._lost:
            self._writer = asyncio.get_running_loop().create_future()
            try:
                await self._writer
            finally:
                self._writer = None
        if self._lost and (self._error is not None or self._full):
            raise UpstreamGone(f"the SSH client closed the channel ({self._error or 'lost'})")

    def _send(self, data: bytes) -> None:
        chan = self.chan
        if chan is None or chan.is_closing():
            raise UpstreamGone("the SSH client closed the channel")
        try:
            chan.write(data)
        except _GONE as exc:
            raise UpstreamGone(f"the SSH client closed the channel ({exc})") from None

    async def write_eof(self) -> None:
        if self.chan is not None:
            with contextlib.suppress(*_GONE):
                self.chan.write_eof()

    @property
    def ended(self) -> bool:
        return (self._eof and not self._held) or self.chan is None or self.chan.is_closing()

    def close(self) -> None:
        if self.chan is not None:
            with contextlib.suppress(*_GONE):
                self.chan.write_eof()
                self.chan.close()

    def abort(self) -> None:
        if self.chan is not None:
            with contextlib.suppress(*_GONE):
                self.chan.abort()


def _wake(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


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
                _, pipe = await self.conn.create_connection(
                    ChannelPipe, forward.host, forward.port, host, port, window=WINDOW,
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
        assert isinstance(pipe, ChannelPipe)
        self._pipes.add(pipe)
        return pipe
