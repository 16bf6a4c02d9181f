"""``MuxStream``: one muxado stream of a ``MuxConnection``, with ``read``/``write`` that
respect flow control, ``close`` (a FIN) and ``reset`` (an abort).

A writer blocks while its stream has more than ``HIGH_WATER`` bytes waiting for the peer's
window, and while the transport has more than it wants to buffer (a peer that grants window
but does not read would otherwise make us queue without bound); a reader returns window to
the peer as it takes data. One stalled stream therefore holds back only its own writer."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from edgeway.tunnel.muxado.events import StreamError
from edgeway.tunnel.muxado.frames import ErrorCode

if TYPE_CHECKING:
    from edgeway.tunnel.muxado.aio import MuxConnection

HIGH_WATER: Final = 64 * 1024
CLOSE_TIMEOUT: Final = 30.0  # a closed stream whose peer never half-closes is reset after this


class StreamClosed(Exception):
    def __init__(self, code: ErrorCode) -> None:
        super().__init__(f"stream closed: {code.name}")
        self.code = code


def _wake(waiters: list[asyncio.Future[None]] | None) -> None:
    for fut in waiters or ():
        if not fut.done():
            fut.set_result(None)


class MuxStream:
    def __init__(self, conn: MuxConnection, stream_id: int) -> None:
        self.id = stream_id
        self._conn = conn
        self._chunks: deque[bytes | memoryview] = deque()
        self._eof = False
        self._error: ErrorCode | None = None
        # Futures of the tasks blocked in read / write (None while nobody waits).
        self._readers: list[asyncio.Future[None]] | None = None
        self._writers: list[asyncio.Future[None]] | None = None
        self.on_window: Callable[[], None] | None = None
        # ``deliver``: data goes to ``_on_data`` as it arrives instead of waiting for
        # ``read`` (window is returned with ``taken``), and the end to ``_on_end``
        self._on_data: Callable[[bytes], None] | None = None
        self._on_end: Callable[[], None] | None = None
        self._closing: asyncio.TimerHandle | None = None  # set by ``close``

    @property
    def conn(self) -> MuxConnection:
        return self._conn

    @property
    def ended(self) -> bool:
        """The peer half-closed or the stream failed: nothing more will be read."""
        return self._eof or self._error is not None

    @property
    def broken(self) -> bool:
        """The stream failed (a reset, the connection's end) rather than ended with a FIN."""
        return self._error is not None and not self._eof

    async def read(self, n: int = 65536) -> bytes:
        """Up to ``n`` bytes; ``b""`` once the peer half-closed and everything was read."""
        while not self._chunks and not self._eof and self._error is None:
            await self._wait(True)
        chunks = self._chunks
        if chunks:
            first = chunks[0]
            if len(chunks) == 1 and len(first) <= n:
                chunks.popleft()
                data = first if type(first) is bytes else bytes(first)
            else:
                parts: list[bytes | memoryview] = []
                size = 0
                while chunks and size < n:
                    chunk = chunks[0]
                    if size + len(chunk) <= n:
                        parts.append(chunks.popleft())
                        size += len(chunk)
                    else:  # the rest stays, as a view: small reads of a big chunk copy once
                        view = memoryview(chunk)
                        parts.append(view[:n - size])
                        chunks[0] = view[n - size:]
                        size = n
                data = b"".join(parts)
            conn = self._conn
            conn.session.consumed(self.id, len(data))
            conn.kick()
            return data
        if self._error is not None and not self._eof:
            raise StreamClosed(self._error)
        return b""

    def deliver(self, on_data: Callable[[bytes], None], on_end: Callable[[], None]) -> None:
        """From now, each piece of data goes to ``on_data`` as it arrives (what ``read``
        would return; the receiver gives window back with ``taken``), and the end of the
        stream (the peer's FIN, a reset, the connection's end) to ``on_end``, once: those
        already here first. ``hold`` stops it (data waits for ``read`` or ``deliver``)."""
        self._on_data, self._on_end = on_data, on_end
        chunks = self._chunks
        while chunks and self._on_data is on_data:
            chunk = chunks.popleft()
            on_data(chunk if type(chunk) is bytes else bytes(chunk))
        if self._on_data is on_data and (self._eof or self._error is not None):
            self._end()

    def hold(self) -> None:
        """Stop ``deliver``-ing."""
        self._on_data = self._on_end = None

    def taken(self, n: int) -> None:
        """``n`` bytes ``deliver``-ed were taken: their window goes back to the peer."""
        conn = self._conn
        conn.session.consumed(self.id, n)
        conn.kick()

    def _end(self) -> None:
        on_end = self._on_end
        self._on_data = self._on_end = None
        if on_end is not None:
            on_end()

    async def readexactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = await self.read(n - len(out))
            if not chunk:
                raise asyncio.IncompleteReadError(bytes(out), n)
            out += chunk
        return bytes(out)

    async def write(self, data: bytes, *, eof: bool = False) -> None:
        if not self.send_nowait(data, eof=eof):
            await self.drain()

    async def drain(self) -> None:
        """Until no more than ``HIGH_WATER`` bytes wait for the peer's window and the
        transport takes more (``write`` is ``send_nowait``, then this when it said so)."""
        conn = self._conn
        while conn.session.pending(self.id) > HIGH_WATER or conn.backlogged:
            if self._error is not None:
                raise StreamClosed(self._error)
            await self._wait(False)

    def send_nowait(self, data: bytes, *, eof: bool = False) -> bool:
        """``write`` without waiting: False if more than ``HIGH_WATER`` bytes now wait for the
        peer's window, or the connection's transport has more than it wants to buffer (the
        peer does not read): ``on_window`` is called as that changes, or when the stream
        fails."""
        if self._error is not None:
            raise StreamClosed(self._error)
        conn = self._conn
        session = conn.session
        session.send(self.id, data, fin=eof)
        conn.kick()
        if eof:
            conn.forget_if_done(self.id)
        return session.pending(self.id) <= HIGH_WATER and not conn.backlogged

    def writable(self) -> bool:
        """No more than ``HIGH_WATER`` bytes wait for window and the transport takes more (or
        the stream failed)."""
        conn = self._conn
        return self._error is not None or (
            conn.session.pending(self.id) <= HIGH_WATER and not conn.backlogged)

    async def write_eof(self) -> None:
        await self.write(b"", eof=True)

    def reset(self, code: ErrorCode = ErrorCode.STREAM_CANCELLED) -> None:
        """Abort the stream (FIN and RST): pending data is dropped, both directions end. On
        a connection that ended there is nothing to send, nor to wait for."""
        conn = self._conn
        if not conn.closed.is_set():
            if conn.session.reset(self.id, code):
                conn.linger()
            conn.kick()
        self._fail(code)
        conn.forget(self.id)

    def close(self) -> None:
        """End the stream gracefully: a FIN after what was written, and whatever the peer
        still sends is dropped (its window returned) until its FIN, which ends the stream;
        a peer that never sends one gets the stream reset after ``CLOSE_TIMEOUT``."""
        conn = self._conn
        session = conn.session
        if conn.closed.is_set() or not session.is_open(self.id) or self._closing is not None:
            return  # (an ended connection sends nothing more: no timer may hold it)
        if self._chunks:
            session.consumed(self.id, sum(len(c) for c in self._chunks))
            self._chunks.clear()
        with contextlib.suppress(StreamError):
            session.send(self.id, b"", fin=True)  # unless a FIN went already
        conn.kick()
        if session.is_open(self.id):
            self._closing = conn._loop.call_later(CLOSE_TIMEOUT, self.reset)
        else:
            conn.forget(self.id)

    async def _wait(self, reading: bool) -> None:
        fut = self._conn._loop.create_future()
        if reading:
            if self._readers is None:
                self._readers = []
            waiters = self._readers
        else:
            if self._writers is None:
                self._writers = []
            waiters = self._writers
        waiters.append(fut)
        try:
            await fut
        finally:
            with contextlib.suppress(ValueError):
                waiters.remove(fut)

    def _data(self, data: bytes) -> None:
        if self._closing is not None:  # closed: dropped, and the peer may send more
            self._conn.session.consumed(self.id, len(data))
            return
        if self._on_data is not None:
            self._on_data(data)
            return
        self._chunks.append(data)
        if self._readers:
            _wake(self._readers)

    def _ended(self) -> None:
        self._eof = True
        _wake(self._readers)
        self._end()

    def _window(self) -> None:
        if self._writers:
            _wake(self._writers)
        if self.on_window is not None:
            self.on_window()

    def _fail(self, code: ErrorCode) -> None:
        if self._closing is not None:
            self._closing.cancel()
        self._error = code
        _wake(self._readers)
        _wake(self._writers)
        if self.on_window is not None:
            self.on_window()
        self._end()
