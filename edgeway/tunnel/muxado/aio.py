"""The asyncio shell around the muxado session, and ``MuxStream`` objects with ``read``/``write``
that respect flow control.

A writer blocks while its stream has more than ``HIGH_WATER`` bytes waiting for the peer's
window, and while the transport has more than it wants to buffer (a peer that grants window
but does not read would otherwise make us queue without bound); a reader returns window to
the peer as it takes data. One stalled stream therefore holds back only its own writer.

The connection takes over the transport under the stream pair it is given: it becomes the
transport's protocol (an ``asyncio.BufferedProtocol``), so TLS decrypts straight into the
session's buffer and frames are handled in the read callback, with no reader task and no copy
through a ``StreamReader``. Output of the session goes out in one ``transport.write`` per
event-loop pass (scheduled with ``call_soon`` by whatever produced it), so the frames that one
pass produces share TLS records and a send.

Stream budget. The ngrok SDKs end the whole session when the server opens a stream beyond
their limit (512 in the Rust SDK, streams the SDK opened included), and they count a stream
until *they* are done with it. So ``open_stream`` waits (first come, first served) while
``max_open`` streams are open, counting streams this side reset while the peer may still
hold them for ``LINGER`` seconds (see "Resets" in ``session``), rather than failing: a burst
of public connections queues instead of ending the session. A stream is ended with ``close``
(a FIN; what still arrives is dropped, its window returned, until the peer's FIN) or
``reset`` (an abort).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import socket
from collections import deque
from collections.abc import Callable
from typing import cast

from edgeway.tunnel.muxado.frames import ErrorCode
from edgeway.tunnel.muxado.session import (
    ConnectionLost,
    DataReceived,
    Event,
    GoAway,
    Session,
    StreamEnded,
    StreamError,
    StreamOpened,
    StreamReset,
    WindowOpened,
)

HIGH_WATER = 64 * 1024
BACKLOG = 1 << 20  # data queued for one write of the connection, beyond which writers wait
LINGER = 5.0  # seconds a reset stream is counted as open (the peer may still hold it)
CLOSE_TIMEOUT = 30.0  # a closed stream whose peer never half-closes is reset after this
TLS_RECORD = 16384  # the most plaintext one TLS record carries
QUICKACK: int | None = getattr(socket, "TCP_QUICKACK", None)
_ONE = ctypes.c_int(1)
try:  # setsockopt on the descriptor itself: uvloop builds a socket object per call otherwise
    _setsockopt = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True).setsockopt
except (OSError, AttributeError):
    QUICKACK = None


def _fd(writer: asyncio.StreamWriter) -> int:
    """The descriptor of a TCP transport (-1: none, or not TCP)."""
    sock = writer.get_extra_info("socket")
    if QUICKACK is None or sock is None or sock.type != socket.SOCK_STREAM \
            or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return -1
    return int(sock.fileno())


_HANDLERS: set[asyncio.Task[object]] = set()  # connection handlers kept alive (``adopt``)


class StreamClosed(Exception):
    def __init__(self, code: ErrorCode) -> None:
        super().__init__(f"stream closed: {code.name}")
        self.code = code


def adopt(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
          protocol: asyncio.BaseProtocol) -> tuple[bytes, bool]:
    """Make ``protocol`` the protocol of the transport under a stream pair (from
    ``open_connection``/``start_server``), for code that takes bytes as they arrive rather than
    through the ``StreamReader``. Returns the bytes the reader already held, and whether it had
    seen the end (EOF or an error): then no more will come. The writer stays good for
    ``write``, ``write_eof`` and ``close``, not for ``drain`` or ``wait_closed``."""
    held = getattr(reader, "_buffer", None)
    early = bytes(held) if held else b""
    if isinstance(held, bytearray):
        held.clear()
    transport = cast(asyncio.Transport, writer.transport)
    previous = transport.get_protocol()
    transport.set_protocol(protocol)
    ended = (reader.exception() is not None or bool(getattr(reader, "_eof", False))
             or transport.is_closing())
    if isinstance(previous, asyncio.StreamReaderProtocol):
        # Its life with this transport is over: let it drop the writer, whose link back to
        # it would otherwise make a cycle holding the transport (and its TLS state) until
        # the cycle collector runs. It also drops the task of ``start_server``'s handler,
        # which only it held strongly: the task (ours, running) is kept here instead.
        task = asyncio.current_task()
        if task is not None and not task.done():
            _HANDLERS.add(task)
            task.add_done_callback(_HANDLERS.discard)
        previous.connection_lost(None)
    if not ended and not transport.is_reading():
        transport.resume_reading()  # the stream reader had paused it
    return early, ended


def records(parts: list[bytes | memoryview], size: int = TLS_RECORD
            ) -> list[bytes | memoryview]:
    """``parts`` regrouped for ``writelines`` so that every buffer but the last is a whole
    number of ``size``-byte records. A TLS transport encrypts each buffer it is given on its
    own, so a frame header written alone would be a record of its own, and joining everything
    copies every payload. Here parts of ``size`` bytes or more go out as views; smaller ones,
    with what it takes of the next large part to reach a record boundary, are joined: at most
    ``size`` bytes are copied per large part."""
    out: list[bytes | memoryview] = []
    small: list[bytes | memoryview] = []
    small_len = 0
    for part in parts:
        n = len(part)
        if not n:
            continue
        if n < size:
            small.append(part)
            small_len += n
            continue
        view = memoryview(part)
        if small_len:
            fill = -small_len % size
            small.append(view[:fill])
            out.append(b"".join(small))
            view = view[fill:]
        whole = len(view) - len(view) % size
        if whole:
            out.append(view[:whole])
        small, small_len = ([view[whole:]], len(view) - whole) if whole < len(view) else ([], 0)
    if small:
        out.append(small[0] if len(small) == 1 else b"".join(small))
    return out


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
        self._closing: asyncio.TimerHandle | None = None  # set by ``close``

    @property
    def conn(self) -> MuxConnection:
        return self._conn

    @property
    def ended(self) -> bool:
        """The peer half-closed or the stream failed: nothing more will be read."""
        return self._eof or self._error is not None

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
        """Abort the stream (FIN and RST): pending data is dropped, both directions end."""
        conn = self._conn
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
        if not session.is_open(self.id) or self._closing is not None:
            return
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
        self._chunks.append(data)
        if self._readers:
            _wake(self._readers)

    def _ended(self) -> None:
        self._eof = True
        _wake(self._readers)

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


class _Protocol(asyncio.BufferedProtocol):
    """What the transport calls: everything is passed on to the connection.

    The link to the connection is dropped when the transport is lost: uvloop's TLS protocol
    keeps our bound methods, and with them a cycle (transport, TLS protocol, us, the
    connection) that only the cycle collector would free, rarely, together with the
    session's buffers and the TLS state's 256 KiB. Junk connections then grew the memory by
    megabytes a second."""

    def __init__(self, conn: MuxConnection) -> None:
        self.conn: MuxConnection | None = conn

    def get_buffer(self, sizehint: int) -> memoryview:
        conn = self.conn
        return conn.session.get_buffer(sizehint) if conn else memoryview(bytearray(65536))

    def buffer_updated(self, nbytes: int) -> None:
        if self.conn is not None:
            self.conn._received(nbytes)

    def eof_received(self) -> bool:
        if self.conn is not None:
            self.conn._ended()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            conn._lost()

    def pause_writing(self) -> None:
        if self.conn is not None:
            self.conn._paused = True

    def resume_writing(self) -> None:
        if self.conn is not None:
            self.conn._resumed()


class MuxConnection:
    """A muxado session on an asyncio transport. ``accept`` yields streams the peer opened.

    ``reader``/``writer`` are the pair ``asyncio.open_connection``/``start_server`` give; the
    connection takes their transport over (bytes the reader already holds included) and
    neither is used afterwards."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                 client: bool, max_streams: int = 512, max_open: int | None = None) -> None:
        self.session = Session(client=client, max_streams=max_streams)
        self.max_open = max_open or max_streams
        self._lingering = 0
        self._backlog_waiters = False  # a writer waited for ``backlogged`` to clear
        self._openers: deque[asyncio.Future[None]] = deque()
        self._loop = asyncio.get_running_loop()
        self._writer = writer  # kept: a collected StreamWriter closes its transport
        self._transport = cast(asyncio.Transport, writer.transport)
        self._fd = _fd(writer)
        self._streams: dict[int, MuxStream] = {}
        self._accepted: asyncio.Queue[MuxStream | None] = asyncio.Queue()
        self._flush_at_end_of_pass = False
        self._ack_owed = False  # bytes were read and nothing sent back since
        self._paused = False
        self._gone: asyncio.Future[None] = self._loop.create_future()
        self._tasks: set[asyncio.Task[None]] = set()
        self.closed = asyncio.Event()
        self.peer_goaway: GoAway | None = None  # the peer's goodbye, when it said one
        # What the stream reader already received is the start of the session's bytes.
        early, ended = adopt(reader, writer, _Protocol(self))
        if early:
            self._dispatch(self.session.receive(early))
            self.kick()
        if ended:
            self._ended()

    def kick(self) -> None:
        """Send what the session has to send, at the end of this event-loop pass."""
        if not self._flush_at_end_of_pass:
            self._flush_at_end_of_pass = True
            self._loop.call_soon(self._flush)

    def forget_if_done(self, stream_id: int) -> None:
        """Drop a stream both sides have closed (its object keeps any unread data). A writer
        still waiting is woken: its data went out (window that arrived with the peer's FIN
        in one read is used after the FIN is handled)."""
        if not self.session.is_open(stream_id):
            stream = self._streams.pop(stream_id, None)
            if stream is not None:
                if stream._closing is not None:
                    stream._closing.cancel()
                stream._window()
            self._wake_openers()

    def forget(self, stream_id: int) -> None:
        """A stream this side reset: no longer ours to dispatch to."""
        self._streams.pop(stream_id, None)
        self._wake_openers()

    @property
    def open_count(self) -> int:
        """Streams counted against ``max_open``."""
        return self.session.stream_count + self._lingering

    @property
    def crowded(self) -> bool:
        """No stream can be opened right now without waiting."""
        return self.open_count >= self.max_open or bool(self._openers)

    def linger(self) -> None:
        """Count a stream the peer may still hold for ``LINGER`` seconds."""
        self._lingering += 1
        self._loop.call_later(LINGER, self._unlinger)

    def _unlinger(self) -> None:
        self._lingering -= 1
        self._wake_openers()

    def _wake_openers(self) -> None:
        """Let the first waiting openers go, as many as the budget has room for."""
        room = self.max_open - self.open_count
        openers = self._openers
        while openers and (room > 0 or self.closed.is_set()):
            fut = openers.popleft()
            if not fut.done():
                fut.set_result(None)
                room -= 1

    async def open_stream(self) -> MuxStream:
        """A new stream, once the budget allows one (see the module docstring); a session
        that is closing raises ``StreamError``."""
        session = self.session
        if self.closed.is_set() or session.closed or session.peer_gone:
            raise StreamError("the session is closing")
        if self._openers or self.open_count >= self.max_open:
            fut = self._loop.create_future()
            self._openers.append(fut)
            proceed = False
            try:
                while True:
                    await fut
                    if self.closed.is_set() or session.closed or session.peer_gone:
                        raise StreamError("the session is closing")
                    if self.open_count < self.max_open:
                        proceed = True
                        break
                    fut = self._loop.create_future()  # raced: wait again, first in line
                    self._openers.appendleft(fut)
            finally:
                if not proceed:
                    if fut in self._openers:
                        self._openers.remove(fut)
                    elif fut.done():
                        self._wake_openers()  # woken, then cancelled: pass the turn on
        stream = MuxStream(self, session.open_stream())
        self._streams[stream.id] = stream
        if self._openers:
            self._wake_openers()
        return stream

    async def accept(self) -> MuxStream | None:
        """The next stream the peer opened, or None once the connection is gone."""
        return await self._accepted.get()

    async def close(self, code: ErrorCode = ErrorCode.NONE, message: str = "") -> None:
        self.session.close(code, message)
        await self._shutdown(ErrorCode.SESSION_CLOSED)

    def _quickack(self) -> None:
        """Acknowledge the peer's segments at once. The ngrok SDK leaves Nagle on: it writes a
        small window update, then holds the response back until that is acknowledged, which a
        delayed ACK stalls for ~40 ms. Linux leaves quick-ack mode by itself; re-arm it.

        Only needed after a read that nothing was sent back for (``_flush``): a write of ours
        carries the ACK anyway, and the system call (a socket object built each time under
        uvloop) is not free. The descriptor is only used while the transport is open: it is
        closed (and its number free for reuse) only after ``is_closing`` turns true."""
        if self._fd >= 0 and not self._transport.is_closing():
            _setsockopt(self._fd, socket.IPPROTO_TCP, QUICKACK, ctypes.byref(_ONE), 4)

    # ---- transport callbacks ----------------------------------------------------------

    def _received(self, nbytes: int) -> None:
        if self.closed.is_set():
            return
        self._ack_owed = True
        events = self.session.buffer_updated(nbytes)
        if events:
            self._dispatch(events)
        self.kick()
        if self.session.closed:
            self._ended()  # a protocol error: the GOAWAY is flushed, then the transport closed

    def _ended(self) -> None:
        """The peer's bytes ended (EOF, or a protocol error): shut the connection down."""
        if not self.closed.is_set() and not self._tasks:
            task = self._loop.create_task(self._shutdown(ErrorCode.PEER_EOF))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    @property
    def backlogged(self) -> bool:
        """Writers should wait: the transport has more than it wants to buffer, or more than
        ``BACKLOG`` bytes of data wait for this event-loop pass's write."""
        if self._paused or self.session.queued > BACKLOG:
            self._backlog_waiters = True
            return True
        return False

    def _resumed(self) -> None:
        """The transport takes more: send what waits, and let the writers that waited go."""
        self._paused = False
        self.kick()
        self._release_writers()

    def _release_writers(self) -> None:
        if not self._backlog_waiters:
            return
        self._backlog_waiters = False
        for stream in list(self._streams.values()):
            if stream._writers or stream.on_window is not None:
                stream._window()

    def _lost(self) -> None:
        if not self._gone.done():
            self._gone.set_result(None)
        self._ended()

    def _flush(self) -> None:
        self._flush_at_end_of_pass = False
        if self._paused or self._transport.is_closing():
            return
        parts = self.session.data_to_send_parts()
        if parts:
            self._ack_owed = False
            out = records(parts) if len(parts) > 1 else parts
            with contextlib.suppress(ConnectionError, OSError, RuntimeError):
                if len(out) == 1:
                    self._transport.write(out[0])
                else:
                    self._transport.writelines(out)
            if not self._paused:  # (the write may have paused the transport)
                self._release_writers()
        elif self._ack_owed:
            self._ack_owed = False
            self._quickack()

    def _dispatch(self, events: list[Event]) -> None:
        streams = self._streams
        done: list[int] = []  # streams that may be over: forgotten after the batch, so that
        for ev in events:     # a reset that came with a FIN still reaches its stream
            if type(ev) is DataReceived:
                stream = streams.get(ev.stream_id)
                if stream is not None:
                    stream._data(ev.data)
            elif isinstance(ev, StreamOpened):
                stream = streams[ev.stream_id] = MuxStream(self, ev.stream_id)
                self._accepted.put_nowait(stream)
            elif isinstance(ev, WindowOpened):
                stream = streams.get(ev.stream_id)
                if stream is not None:
                    stream._window()
                    done.append(ev.stream_id)  # its last bytes and FIN may be out
            elif isinstance(ev, StreamEnded):
                stream = streams.get(ev.stream_id)
                if stream is not None:
                    stream._ended()
                    done.append(ev.stream_id)
            elif isinstance(ev, StreamReset):
                stream = streams.pop(ev.stream_id, None)
                if stream is not None:
                    stream._fail(ev.code)
                self._wake_openers()
            elif isinstance(ev, ConnectionLost | GoAway):
                if isinstance(ev, GoAway):
                    self.peer_goaway = ev
                self._accepted.put_nowait(None)
        for stream_id in done:
            self.forget_if_done(stream_id)

    async def _shutdown(self, code: ErrorCode) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        for stream in self._streams.values():
            stream._fail(code)
        self._streams.clear()  # (each refers back to us: no cycles left for the collector)
        self._wake_openers()  # they find the session closing
        self._accepted.put_nowait(None)
        # Flush and close before the first await: whoever waits on ``accept`` may cancel us.
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            out = self.session.data_to_send()
            if out and not self._transport.is_closing():
                self._transport.write(out)
            self._transport.close()
        try:
            # A TLS close waits for the peer's close_notify; a silent peer must not hold the
            # socket open.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._gone), 1)
        finally:
            self._transport.abort()
