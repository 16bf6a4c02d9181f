"""Where public traffic goes: a proxy stream to an agent, or a plain TCP (or TLS) connection
to a static backend. Both look the same to the edge: read, write, close; ``splice`` joins one
to a public connection.

Backpressure runs end to end: while the agent's window for a stream is exhausted, the writer
blocks, so the public socket is not read; while the public client is slow, ``drain`` blocks,
so the stream is not read and the agent's window is not reopened.

A splice with an agent's stream (TCP tunnels, TLS passthrough, WebSocket upgrades) takes the
public transport over and carries both directions from callbacks (``edgeway.tunnel.splice``):
reading pauses instead of a writer blocking, and the stream's window waits for the transport
to drain.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable
from typing import Protocol

from edgeway.tunnel.muxado.events import StreamError
from edgeway.tunnel.muxado.stream import MuxStream, StreamClosed
from edgeway.tunnel.splice import splice_stream

READ_MAX = 1 << 20  # from a stream: whatever it holds (at most a window), in one piece


class UpstreamGone(Exception):
    """The agent or the static backend went away."""


class Delivering(Protocol):
    """A pipe's incoming side as callbacks (``MuxStream``'s, an SSH channel's): from
    ``deliver`` on, data goes to ``on_data`` as it arrives and the end (once) to ``on_end``;
    ``taken`` returns window for what was delivered; ``hold`` stops it (data waits for
    ``read``); ``broken``: it ended by a failure rather than the other end's EOF."""

    def deliver(self, on_data: Callable[[bytes], None], on_end: Callable[[], None]) -> None:
        ...

    def hold(self) -> None:
        ...

    def taken(self, n: int) -> None:
        ...

    @property
    def broken(self) -> bool:
        ...


def must_drain(writer: asyncio.StreamWriter) -> bool:
    """Whether ``writer.drain()`` has anything to wait for: the transport holds bytes it
    could not send yet, or is closing (a lost peer raises there). Per request, the
    coroutines of a ``drain`` that returns at once cost more than this check."""
    transport = writer.transport
    return bool(transport.get_write_buffer_size()) or transport.is_closing()


class Pipe:
    async def read(self) -> bytes:
        raise NotImplementedError

    async def write(self, data: bytes) -> None:
        raise NotImplementedError

    def write_nowait(self, data: bytes) -> bool:
        """``write`` when it need not wait (no coroutine, for the per-request head): True if
        ``data`` went; False if nothing was written (``await write(data)`` then)."""
        return False

    async def write_eof(self) -> None:
        raise NotImplementedError

    def delivering(self) -> Delivering | None:
        """The incoming side as callbacks, when the pipe has them (the edge's callback path
        then answers on it); None: ``read`` only."""
        return None

    @property
    def ended(self) -> bool:
        """The other end closed or failed: the pipe cannot carry another exchange."""
        raise NotImplementedError

    def close(self) -> None:
        """End gracefully: what was written goes out, then the end (the other side finishes
        on its own)."""
        raise NotImplementedError

    def abort(self) -> None:
        """End at once, both ways (a reset)."""
        raise NotImplementedError


class StreamPipe(Pipe):
    def __init__(self, stream: MuxStream) -> None:
        self.stream = stream

    async def read(self) -> bytes:
        try:
            return await self.stream.read(READ_MAX)
        except StreamClosed as exc:
            raise UpstreamGone(f"the agent closed the stream ({exc})") from None

    async def write(self, data: bytes) -> None:
        try:
            await self.stream.write(data)
        except (StreamClosed, StreamError) as exc:
            raise UpstreamGone(f"the agent closed the stream ({exc})") from None

    def write_nowait(self, data: bytes) -> bool:
        stream = self.stream
        if not stream.writable():
            return False
        try:
            stream.send_nowait(data)
        except (StreamClosed, StreamError) as exc:
            raise UpstreamGone(f"the agent closed the stream ({exc})") from None
        return True

    async def write_eof(self) -> None:
        with contextlib.suppress(StreamClosed, StreamError):
            await self.stream.write_eof()

    def delivering(self) -> MuxStream:
        return self.stream

    @property
    def ended(self) -> bool:
        return self.stream.ended

    def close(self) -> None:
        self.stream.close()

    def abort(self) -> None:
        with contextlib.suppress(StreamClosed, StreamError):
            self.stream.reset()


class SocketPipe(Pipe):
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def dial(cls, host: str, port: int, tls: bool) -> SocketPipe:
        context = ssl.create_default_context() if tls else None
        try:  # (asyncio.timeout, not wait_for: the task wait_for makes would hold the error)
            async with asyncio.timeout(10):
                reader, writer = await asyncio.open_connection(
                    host, port, ssl=context, server_hostname=host if tls else None)
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            raise UpstreamGone(f"cannot connect to {host}:{port}: {exc}") from None
        return cls(reader, writer)

    async def read(self) -> bytes:
        try:
            return await self.reader.read(65536)
        except (ConnectionError, OSError) as exc:
            raise UpstreamGone(str(exc)) from None

    async def write(self, data: bytes) -> None:
        try:
            self.writer.write(data)
            await self.writer.drain()
        except (ConnectionError, OSError) as exc:
            raise UpstreamGone(str(exc)) from None

    async def write_eof(self) -> None:
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            if self.writer.can_write_eof():
                self.writer.write_eof()

    @property
    def ended(self) -> bool:
        return self.reader.at_eof() or self.writer.is_closing()

    def close(self) -> None:
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            self.writer.close()

    def abort(self) -> None:
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            self.writer.transport.abort()


async def splice(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, pipe: Pipe) -> None:
    """Bytes both ways until both directions ended (half-closes passed on) or one failed."""
    if isinstance(pipe, StreamPipe):
        await splice_stream(reader, writer, pipe.stream)
        return

    async def inbound() -> None:
        while data := await reader.read(65536):
            await pipe.write(data)
        await pipe.write_eof()

    pump = asyncio.create_task(inbound())
    try:
        while data := await pipe.read():
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()  # (a half-close: the client may go on sending)
            await pump
        else:  # TLS has no half-close: the upstream's end ends the connection
            pump.cancel()
            pipe.close()
    except (UpstreamGone, ConnectionError, OSError):
        pipe.abort()
    finally:
        pump.cancel()
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            writer.close()
