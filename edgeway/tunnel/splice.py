"""A muxado stream joined to a transport (the public client's on the server: TCP tunnels, TLS
passthrough, WebSocket upgrades; the local service's on the agent), both directions carried
from callbacks: no task, future or ``StreamReader`` per chunk.

``Splice`` becomes the transport's protocol (``muxado.transport.adopt``). What the transport
reads goes into the stream from ``data_received``; while more than the stream's high-water
mark waits for the peer's window, reading pauses (``on_window`` resumes it). What the stream
receives is ``deliver``-ed to ``transport.write``; its window goes back to the peer at once
while the transport takes more, and only as the transport drains (``resume_writing``) while
its buffer is over the high-water mark: a slow reader on either side holds back its sender,
never the session. Half-closes pass on both ways (a TLS transport has none: there the stream's
end ends the connection, unless ``tls_waits``: then the transport's own end is waited for);
a failure on either side resets the stream.

Subclasses see each direction's bytes (``_sent``, ``_write``, ``_eof``): the agent's HTTP tap
(``edgeway.agent.inspect``).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import cast

from edgeway.tunnel.muxado.events import StreamError
from edgeway.tunnel.muxado.stream import MuxStream, StreamClosed
from edgeway.tunnel.muxado.transport import adopt

_GONE = (ConnectionError, OSError, RuntimeError)  # a transport that ended under a call


class Splice(asyncio.Protocol):
    """The protocol of a transport joined to ``stream`` (see the module docstring); ``run``
    carries both directions until both ended or one failed."""

    def __init__(self, stream: MuxStream, transport: asyncio.Transport, over_ssl: bool, *,
                 tls_waits: bool = False) -> None:
        self.stream, self.transport, self.over_ssl = stream, transport, over_ssl
        self.tls_waits = tls_waits
        loop = asyncio.get_running_loop()
        self.inbound: asyncio.Future[None] = loop.create_future()  # transport -> stream ended
        self.outbound: asyncio.Future[None] = loop.create_future()  # stream -> transport ended
        self.error: Exception | None = None  # the inbound direction ended because of this
        self.broken = False  # the outbound direction failed: the stream is reset
        self.lost = False
        self._read_paused = False
        self._write_paused = False
        self._owed = 0  # delivered bytes whose window waits for the transport to drain
        stream.on_window = self._window

    # -- the transport: what it reads goes into the stream --------------------------------

    def data_received(self, data: bytes) -> None:
        if self.inbound.done():
            return
        try:
            if not self.stream.send_nowait(data):
                self._read_paused = True
                self.transport.pause_reading()
        except (StreamClosed, StreamError) as exc:
            self.end(ConnectionResetError(f"the stream ended ({exc})"))
            return
        self._sent(data)

    def eof_received(self) -> bool:
        self._eof()
        self.end(None)
        return not self.over_ssl  # TCP: keep writing what the stream brings (a half-close)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if exc is None and not self.inbound.done():
            self._eof()  # (closed without a half-close first: the end of its bytes too)
        self.end(exc)
        if exc is not None:
            with contextlib.suppress(StreamClosed, StreamError):
                self.stream.reset()  # the peer's side ends too, not just ours

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        owed, self._owed = self._owed, 0
        if owed and not self.outbound.done():
            self.stream.taken(owed)

    def _window(self) -> None:
        if self._read_paused and self.stream.writable():
            self._read_paused = False
            with contextlib.suppress(*_GONE):
                self.transport.resume_reading()

    def end(self, exc: Exception | None) -> None:
        """The transport's direction ended: EOF passed on to the stream, or ``exc``."""
        if self.inbound.done():
            return
        if exc is None:
            with contextlib.suppress(StreamClosed, StreamError):
                self.stream.send_nowait(b"", eof=True)
        self.error = exc
        self.inbound.set_result(None)

    # -- the stream: what it receives goes to the transport -------------------------------

    def _delivered(self, data: bytes) -> None:
        if self.lost:  # the transport is gone: nothing can take these bytes
            self.fail()
            return
        self._write(data)
        if self.outbound.done():
            return
        if self._write_paused:
            self._owed += len(data)
        else:
            self.stream.taken(len(data))

    def _ended(self) -> None:
        if not self.outbound.done():
            self.outbound.set_result(None)

    def fail(self) -> None:
        """End the outbound direction as failed: the stream is reset."""
        self.broken = True
        self.stream.hold()
        self._ended()

    # -- what subclasses see --------------------------------------------------------------

    def _sent(self, data: bytes) -> None:
        """``data``, read from the transport, went into the stream."""

    def _eof(self) -> None:
        """The transport's side half-closed (before the stream hears of it)."""

    def _write(self, data: bytes) -> None:
        """Put ``data``, from the stream, on the transport."""
        self.transport.write(data)

    # -- both directions -------------------------------------------------------------------

    async def run(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Take the transport over from its stream pair and carry both directions until
        they ended; the writer is closed at the end."""
        stream = self.stream
        early, ended = adopt(reader, writer, self)
        if early:
            self.data_received(early)
        if ended:  # what the stream reader had seen, as the transport would have told us
            exc = reader.exception()
            if exc is not None or self.transport.is_closing():
                self.connection_lost(exc if isinstance(exc, Exception) else None)
            else:
                self.eof_received()
        stream.deliver(self._delivered, self._ended)
        try:
            await self.outbound
            if self.broken or stream.broken:
                raise ConnectionResetError("the stream failed")
            if writer.can_write_eof():
                writer.write_eof()  # (a half-close: the other side may go on sending)
                await self.inbound
            elif self.tls_waits:
                await self.inbound
            else:  # TLS has no half-close: the stream's end ends the connection (a
                self.end(None)  # WebSocket's client waits for it after the closing handshake)
            if self.error is not None:
                raise self.error
        except (ConnectionError, OSError):
            with contextlib.suppress(StreamClosed, StreamError):
                stream.reset()
        finally:
            stream.on_window = None
            stream.hold()
            with contextlib.suppress(*_GONE):
                writer.close()


async def splice_stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        stream: MuxStream) -> None:
    """Bytes both ways between a stream pair's transport and ``stream`` (see ``Splice``)."""
    transport = cast(asyncio.Transport, writer.transport)
    await Splice(stream, transport, writer.get_extra_info("sslcontext") is not None).run(
        reader, writer)
