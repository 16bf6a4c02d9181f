"""Where public traffic goes: a proxy stream to an agent, or a plain TCP (or TLS) connection
to a static backend. Both look the same to the edge: read, write, close; ``splice`` joins one
to a public connection.

Backpressure runs end to end: while the agent's window for a stream is exhausted, the writer
blocks, so the public socket is not read; while the public client is slow, ``drain`` blocks,
so the stream is not read and the agent's window is not reopened.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl

from edgeway.tunnel.muxado.aio import MuxStream, StreamClosed
from edgeway.tunnel.muxado.session import StreamError


class UpstreamGone(Exception):
    """The agent or the static backend went away."""


class Pipe:
    async def read(self) -> bytes:
        raise NotImplementedError

    async def write(self, data: bytes) -> None:
        raise NotImplementedError

    async def write_eof(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class StreamPipe(Pipe):
    def __init__(self, stream: MuxStream) -> None:
        self.stream = stream

    async def read(self) -> bytes:
        try:
            return await self.stream.read()
        except StreamClosed as exc:
            raise UpstreamGone(f"the agent closed the stream ({exc})") from None

    async def write(self, data: bytes) -> None:
        try:
            await self.stream.write(data)
        except (StreamClosed, StreamError) as exc:
            raise UpstreamGone(f"the agent closed the stream ({exc})") from None

    async def write_eof(self) -> None:
        with contextlib.suppress(StreamClosed, StreamError):
            await self.stream.write_eof()

    def close(self) -> None:
        with contextlib.suppress(StreamClosed, StreamError):
            self.stream.reset()


class SocketPipe(Pipe):
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def dial(cls, host: str, port: int, tls: bool) -> SocketPipe:
        context = ssl.create_default_context() if tls else None
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, ssl=context,
                                        server_hostname=host if tls else None), 10)
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

    def close(self) -> None:
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            self.writer.close()


async def splice(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, pipe: Pipe) -> None:
    """Bytes both ways until both directions ended (half-closes passed on) or one failed."""

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
            writer.write_eof()
        await pump
    except (UpstreamGone, ConnectionError, OSError):
        pipe.close()
    finally:
        pump.cancel()
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            writer.close()
