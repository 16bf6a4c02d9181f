"""The asyncio shell around the muxado session: one reader task and one writer task per
connection, and ``MuxStream`` objects with ``read``/``write`` that respect flow control.

A writer blocks while its stream has more than ``HIGH_WATER`` bytes waiting for the peer's
window; a reader returns window to the peer as it takes data. One stalled stream therefore
holds back only its own writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

from edgeway.tunnel.muxado.frames import ErrorCode
from edgeway.tunnel.muxado.session import (
    ConnectionLost,
    DataReceived,
    Event,
    GoAway,
    Session,
    StreamEnded,
    StreamOpened,
    StreamReset,
    WindowOpened,
)

HIGH_WATER = 64 * 1024
QUICKACK: int | None = getattr(socket, "TCP_QUICKACK", None)


class StreamClosed(Exception):
    def __init__(self, code: ErrorCode) -> None:
        super().__init__(f"stream closed: {code.name}")
        self.code = code


class MuxStream:
    def __init__(self, conn: MuxConnection, stream_id: int) -> None:
        self.id = stream_id
        self._conn = conn
        self._buf = bytearray()
        self._eof = False
        self._error: ErrorCode | None = None
        self._readable = asyncio.Event()
        self._writable = asyncio.Event()

    async def read(self, n: int = 65536) -> bytes:
        """Up to ``n`` bytes; ``b""`` once the peer half-closed and everything was read."""
        while not self._buf and not self._eof and self._error is None:
            self._readable.clear()
            await self._readable.wait()
        if self._buf:
            data = bytes(self._buf[:n])
            del self._buf[:n]
            self._conn.session.consumed(self.id, len(data))
            self._conn.kick()
            return data
        if self._error is not None and not self._eof:
            raise StreamClosed(self._error)
        return b""

    async def readexactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = await self.read(n - len(out))
            if not chunk:
                raise asyncio.IncompleteReadError(bytes(out), n)
            out += chunk
        return bytes(out)

    async def write(self, data: bytes, *, eof: bool = False) -> None:
        if self._error is not None:
            raise StreamClosed(self._error)
        self._conn.session.send(self.id, data, fin=eof)
        self._conn.kick()
        if eof:
            self._conn.forget_if_done(self.id)
        while self._conn.session.pending(self.id) > HIGH_WATER:
            if self._error is not None:
                raise StreamClosed(self._error)
            self._writable.clear()
            await self._writable.wait()

    async def write_eof(self) -> None:
        await self.write(b"", eof=True)

    def reset(self, code: ErrorCode = ErrorCode.STREAM_CANCELLED) -> None:
        self._conn.session.reset(self.id, code)
        self._conn.kick()
        self._fail(code)

    def _fail(self, code: ErrorCode) -> None:
        self._error = code
        self._readable.set()
        self._writable.set()


class MuxConnection:
    """A muxado session on an asyncio transport. ``accept`` yields streams the peer opened."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                 client: bool, max_streams: int = 512) -> None:
        self.session = Session(client=client, max_streams=max_streams)
        self._reader, self._writer = reader, writer
        self._sock = writer.get_extra_info("socket") if QUICKACK else None
        self._streams: dict[int, MuxStream] = {}
        self._accepted: asyncio.Queue[MuxStream | None] = asyncio.Queue()
        self._dirty = asyncio.Event()
        self.closed = asyncio.Event()
        self._tasks = [asyncio.create_task(self._read_loop()),
                       asyncio.create_task(self._write_loop())]

    def kick(self) -> None:
        self._dirty.set()

    def forget_if_done(self, stream_id: int) -> None:
        """Drop a stream both sides have closed (its object keeps any unread data)."""
        if not self.session.is_open(stream_id):
            self._streams.pop(stream_id, None)

    async def open_stream(self) -> MuxStream:
        stream = MuxStream(self, self.session.open_stream())
        self._streams[stream.id] = stream
        return stream

    async def accept(self) -> MuxStream | None:
        """The next stream the peer opened, or None once the connection is gone."""
        return await self._accepted.get()

    async def close(self, code: ErrorCode = ErrorCode.NONE, message: str = "") -> None:
        self.session.close(code, message)
        self.kick()
        await asyncio.sleep(0)
        await self._shutdown(ErrorCode.SESSION_CLOSED)

    def _quickack(self) -> None:
        """Acknowledge the peer's segments at once. The ngrok SDK leaves Nagle on: it writes a
        small window update, then holds the response back until that is acknowledged, which a
        delayed ACK stalls for ~40 ms. Linux leaves quick-ack mode by itself; re-arm it."""
        if self._sock is not None:
            try:
                self._sock.setsockopt(socket.IPPROTO_TCP, QUICKACK, 1)
            except (OSError, ValueError, TypeError):  # closed, or not a TCP socket
                self._sock = None

    async def _read_loop(self) -> None:
        try:
            while not self.session.closed:
                data = await self._reader.read(65536)
                if not data:
                    break
                self._quickack()
                self._dispatch(self.session.receive(data))
                self.kick()
        except (ConnectionError, OSError):
            pass
        await self._shutdown(ErrorCode.PEER_EOF)

    async def _write_loop(self) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while True:
                await self._dirty.wait()
                self._dirty.clear()
                out = self.session.data_to_send()
                if out:
                    self._writer.write(out)
                    await self._writer.drain()
                if self.closed.is_set() and not self._dirty.is_set():
                    return

    def _dispatch(self, events: list[Event]) -> None:
        for ev in events:
            if isinstance(ev, StreamOpened):
                stream = self._streams[ev.stream_id] = MuxStream(self, ev.stream_id)
                self._accepted.put_nowait(stream)
            elif isinstance(ev, DataReceived | StreamEnded | StreamReset | WindowOpened):
                self._on_stream_event(ev)
            elif isinstance(ev, ConnectionLost | GoAway):
                self._accepted.put_nowait(None)

    def _on_stream_event(self, ev: DataReceived | StreamEnded | StreamReset | WindowOpened
                         ) -> None:
        stream = self._streams.get(ev.stream_id)
        if stream is None:
            return
        if isinstance(ev, DataReceived):
            stream._buf += ev.data
            stream._readable.set()
        elif isinstance(ev, StreamEnded):
            stream._eof = True
            stream._readable.set()
            self.forget_if_done(ev.stream_id)
        elif isinstance(ev, StreamReset):
            stream._fail(ev.code)
            self._streams.pop(ev.stream_id, None)
        else:
            stream._writable.set()

    async def _shutdown(self, code: ErrorCode) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        for stream in self._streams.values():
            stream._fail(code)
        self._accepted.put_nowait(None)
        # Flush and close before the first await: whoever waits on ``accept`` may cancel us.
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            out = self.session.data_to_send()
            if out:
                self._writer.write(out)
            self._writer.close()
        try:
            # A TLS close waits for the peer's close_notify; a silent peer must not hold the
            # socket open.
            with contextlib.suppress(ConnectionError, OSError, TimeoutError):
                await asyncio.wait_for(self._writer.wait_closed(), 1)
        finally:
            self._writer.transport.abort()
            for task in self._tasks:
                if task is not asyncio.current_task():
                    task.cancel()
