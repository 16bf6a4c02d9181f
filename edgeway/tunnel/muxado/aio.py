"""The asyncio shell around the muxado session: ``MuxConnection``, whose streams
(``stream.MuxStream``) have ``read``/``write`` that respect flow control (see there).

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
from collections import deque
from typing import Final, cast

from edgeway.tunnel.muxado.events import (
    ConnectionLost,
    DataReceived,
    Event,
    GoAway,
    StreamEnded,
    StreamError,
    StreamOpened,
    StreamReset,
    WindowOpened,
)
from edgeway.tunnel.muxado.frames import ErrorCode
from edgeway.tunnel.muxado.session import Session
from edgeway.tunnel.muxado.stream import MuxStream
from edgeway.tunnel.muxado.transport import abort, adopt, quickack, records, tcp_fd

BACKLOG: Final = 1 << 20  # data queued for one write of the connection, beyond which writers wait
LINGER = 5.0  # seconds a reset stream is counted as open (the peer may still hold it)


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
        self._fd = tcp_fd(writer)
        self._streams: dict[int, MuxStream] = {}
        self._accepted: asyncio.Queue[MuxStream | None] = asyncio.Queue()
        self._flush_at_end_of_pass = False
        self._ack_owed = False  # bytes were read and nothing sent back since
        self._paused = False
        self._gone: asyncio.Future[None] = self._loop.create_future()
        self._tasks: set[asyncio.Task[None]] = set()
        self.closed = asyncio.Event()
        self.peer_goaway: GoAway | None = None  # the peer's goodbye, when it said one
        self.retired = False  # no new streams: those open finish (``retire``)
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
        """No stream can be opened right now without waiting (or at all: ``retired``)."""
        return self.open_count >= self.max_open or bool(self._openers) or self.retired

    def retire(self) -> None:
        """Open no more streams (``open_stream`` refuses, and a keep-alive pool does not keep
        those that finish a request); the open ones go on until the connection closes."""
        self.retired = True

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
        if self.closed.is_set() or session.closed or session.peer_gone or self.retired:
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
            quickack(self._fd)

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
        # (cleared first: each refers back to us, no cycles left for the collector; and a
        # stream's end callback may reset another stream, which forgets it here)
        streams = list(self._streams.values())
        self._streams.clear()
        for stream in streams:
            stream._fail(code)
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
            abort(self._transport)
