"""The muxado session state machine, sans-I/O.

Theory of operation. A ``Session`` is one end of a multiplexed connection. Bytes from the
peer go in through ``receive`` (or are written in place: ``get_buffer``, then
``buffer_updated``), which returns events (a stream opened, data, a half-close, a reset, more
send window, the peer going away). What the application wants to do (open a stream, send,
acknowledge consumed data, reset, close) is recorded, and the bytes to put on the wire come
out of ``data_to_send`` (or ``data_to_send_parts``, unjoined). No sockets, no clocks, no
tasks.

Streams. Ids of streams we open have our parity (a client's are odd from 3, a server's even
from 2). A stream comes to exist for the peer when its first DATA frame arrives with SYN; we
send SYN lazily with our first DATA frame. FIN half-closes one direction; a stream is gone
when both directions are closed, or at RST.

Flow control. Each direction of each stream has a window, 256 KiB unless configured, never
negotiated. We never send more than the peer's window: data past it waits in that stream's
own buffer, so a stalled stream never holds back another. The peer may send us at most our
window; ``consumed`` gives credit back (a WNDINC once enough has been consumed). A peer
overrunning our window gets that stream reset with FLOW_CONTROL. We send a DATA frame of at
most ``MAX_CHUNK`` bytes, and while data waits for window we do not send it in slivers: not
before the window is ``MIN_SEND`` bytes (an eighth of the peer's window at most) or holds all
that waits (the SDK returns window 8 KiB at a time).

Resets. The ngrok SDKs' muxado (Rust) takes an RST as the end of the stream's *writing*
side only: its reader waits on, so a stream reset while the SDK's upstream connection is idle
stays open in the SDK until that upstream closes, and counts against the SDK's limit of 512
streams, whose excess ends the whole session. ``reset`` therefore sends a FIN first (the
SDK's reader sees the end, its copy to the upstream finishes; a server's sessions do this,
their peers being the SDKs), and tells the caller whether
the peer may hold the stream a little longer (it had not half-closed yet), so that the
caller can count it until then. Ending a stream gracefully is a FIN each way.

Limits. At most ``max_streams`` open streams, of which at most ``max_peer_streams`` opened
by the peer: a peer opening more gets STREAM_REFUSED (a server keeps the latter low until
the agent authenticated, and ends a session that goes on opening streams it was refused:
``max_refused``: a flood of SYNs then costs next to nothing). ``max_frame`` bounds a frame's
body (a server keeps it low until then too, so junk cannot make it hold big buffers). A
malformed frame ends the session: a GOAWAY with the error is queued and ``ConnectionLost`` is
returned (with the events of the frames before it); the shell then flushes and closes the
transport.

Cost. This is the data path of every proxied byte: bytes to send are not copied here (they
are queued as they came; the caller joins them or not), received DATA is copied once out of
the receive buffer, consecutive DATA frames of a stream in one read become one
``DataReceived``, and WNDINC frames build no objects at all. Window increments that arrive
together release the data they unblock once, after the batch (their ``WindowOpened`` comes
after the batch's other events).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from edgeway.tunnel.muxado import frames
from edgeway.tunnel.muxado.frames import (
    DATA_T,
    FIN,
    HEADER,
    MAX_INCREMENT,
    SYN,
    U32,
    ErrorCode,
    Frame,
    FrameType,
    ProtocolError,
    error_code,
    scan,
)

WINDOW = 256 * 1024
MAX_CHUNK = 64 * 1024
MIN_SEND = 32 * 1024

_DATA_WORD = FrameType.DATA << 4
_WNDINC_HEAD = (4 << 8) | (FrameType.WNDINC << 4)
_U32_AT = U32.unpack_from


@dataclass(slots=True)
class StreamOpened:
    stream_id: int


@dataclass(slots=True)
class DataReceived:
    stream_id: int
    data: bytes


@dataclass(slots=True)
class StreamEnded:
    """The peer half-closed (FIN): no more data will arrive on this stream."""

    stream_id: int


@dataclass(slots=True)
class StreamReset:
    stream_id: int
    code: ErrorCode
    by_peer: bool


@dataclass(slots=True)
class WindowOpened:
    """The peer granted window: pending data of this stream may have been sent."""

    stream_id: int


@dataclass(slots=True)
class GoAway:
    last_stream_id: int
    code: ErrorCode
    message: str


@dataclass(slots=True)
class ConnectionLost:
    code: ErrorCode
    reason: str


Event = StreamOpened | DataReceived | StreamEnded | StreamReset | WindowOpened | GoAway | \
    ConnectionLost


@dataclass(slots=True)
class _Stream:
    send_window: int
    recv_window: int
    local_open: bool = True
    remote_open: bool = True
    syn_sent: bool = False
    pending: deque[bytes | memoryview] = field(default_factory=deque)
    pending_size: int = 0
    fin_queued: bool = False
    fin_sent: bool = False
    unacked: int = 0  # consumed but not yet returned to the peer as window


class StreamError(Exception):
    """The application used a stream that is not open in that direction."""


class Session:
    def __init__(self, *, client: bool, window: int = WINDOW, max_streams: int = 512,
                 fin_before_rst: bool | None = None) -> None:
        self.client = client
        # A server's peers are the SDKs (see "Resets"); our own agent, a client, sends a bare
        # RST, which the server reads as an abort even after a half-close.
        self.fin_before_rst = not client if fin_before_rst is None else fin_before_rst
        self.window = window
        self.max_streams = max_streams
        self.max_peer_streams = max_streams
        self._peer_streams = 0
        self.max_refused: int | None = None  # set: refusing more ends the session
        self.refused = 0
        self._streams: dict[int, _Stream] = {}
        self._next_id = 3 if client else 2
        self._last_peer_id = 0
        self._out: list[bytes | memoryview] = []
        self._out_data = 0  # DATA payload bytes in ``_out``
        self._rx = frames.FrameBuffer()
        self._max_body = self._full_body = max(window, 1 << 16)  # bigger: FRAME_SIZE error
        self._min_send = max(1, min(MIN_SEND, window // 8))
        self.closed = False
        self.peer_gone = False

    # ---- application side -------------------------------------------------------------

    def open_stream(self) -> int:
        if self.closed or self.peer_gone:
            raise StreamError("the session is closing")
        if len(self._streams) >= self.max_streams:
            raise StreamError("too many open streams")
        sid = self._next_id
        self._next_id += 2
        self._streams[sid] = _Stream(self.window, self.window)
        return sid

    def send(self, stream_id: int, data: bytes | bytearray | memoryview, *,
             fin: bool = False) -> None:
        s = self._streams.get(stream_id)
        if s is None or not s.local_open or s.fin_queued:
            raise StreamError(f"stream {stream_id} is not open for sending")
        n = len(data)
        if n:
            if type(data) is not bytes:
                data = bytes(data)  # the caller may reuse its buffer
            if not s.pending_size and n <= s.send_window and n <= MAX_CHUNK:
                # The common case: one frame, straight out, the payload not copied.
                flags = (FIN if fin else 0) | (0 if s.syn_sent else SYN)
                self._out += (HEADER.pack((n << 8) | _DATA_WORD | flags, stream_id), data)
                self._out_data += n
                s.send_window -= n
                s.syn_sent = True
                if fin:
                    s.fin_queued = s.fin_sent = True
                    s.local_open = False
                    self._reap(stream_id, s)
                return
            s.pending.append(data)
            s.pending_size += n
        s.fin_queued = fin
        self._flush(stream_id, s)

    def pending(self, stream_id: int) -> int:
        """Bytes accepted by ``send`` that wait for the peer's window."""
        s = self._streams.get(stream_id)
        return s.pending_size if s else 0

    def consumed(self, stream_id: int, n: int) -> None:
        """The application has taken ``n`` received bytes: give the peer that window back."""
        s = self._streams.get(stream_id)
        if s is None or n <= 0:
            return
        s.unacked += n
        if s.unacked >= self.window // 4 or s.recv_window < self.window // 2:
            s.recv_window += s.unacked
            self._out.append(HEADER.pack(_WNDINC_HEAD, stream_id) + U32.pack(s.unacked))
            s.unacked = 0

    def reset(self, stream_id: int, code: ErrorCode = ErrorCode.STREAM_CANCELLED) -> bool:
        """Abort a stream: a FIN (unless sent already), then RST. Returns whether the peer may
        still hold the stream (it had not half-closed): see "Resets" in the module docstring.
        """
        s = self._pop(stream_id)
        if s is None:
            return False
        if not s.syn_sent:
            return False  # never on the wire: the peer knows nothing of it
        if not s.fin_sent and self.fin_before_rst:
            self._emit(frames.data(stream_id, fin=True))
        self._emit(frames.rst(stream_id, code))
        return s.remote_open

    def close(self, code: ErrorCode = ErrorCode.NONE, message: str = "") -> None:
        if not self.closed:
            self.closed = True
            self._emit(frames.goaway(self._last_peer_id, code, message))

    def data_to_send(self) -> bytes:
        out = self.data_to_send_parts()
        if not out:
            return b""
        first = out[0]
        return first if len(out) == 1 and type(first) is bytes else b"".join(out)

    def data_to_send_parts(self) -> list[bytes | memoryview]:
        """The bytes to send as the pieces they were queued in (headers, payloads as given to
        ``send``), for a caller that writes them without joining."""
        out, self._out = self._out, []
        self._out_data = 0
        return out

    def is_open(self, stream_id: int) -> bool:
        return stream_id in self._streams

    @property
    def max_frame(self) -> int:
        return self._max_body

    @max_frame.setter
    def max_frame(self, size: int | None) -> None:
        """Bound frame bodies (and the receive buffer's growth) to ``size``; None: the
        window's size again."""
        self._max_body = size or self._full_body
        self._rx.max_room = size

    @property
    def queued(self) -> int:
        """Bytes of stream data ready to send (in ``data_to_send``), not yet taken."""
        return self._out_data

    @property
    def stream_count(self) -> int:
        """Streams open in at least one direction (the peer counts them as open too)."""
        return len(self._streams)

    # ---- wire side --------------------------------------------------------------------

    def receive(self, data: bytes | bytearray | memoryview) -> list[Event]:
        """Bytes from the peer (not kept: the caller may reuse its buffer)."""
        src = memoryview(data).cast("B")
        events: list[Event] = []
        while not self.closed:
            n = self._rx.fill(src) if src else 0
            events += self._parse()
            src = src[n:]
            if not src:
                break
        return events

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """Where the next bytes from the peer may be written in place, then passed on with
        ``buffer_updated`` (as an ``asyncio.BufferedProtocol`` does)."""
        return self._rx.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> list[Event]:
        if self.closed:
            self._rx.clear()
            return []
        self._rx.end += nbytes
        return self._parse()

    def _fail(self, code: ErrorCode, reason: str) -> ConnectionLost:
        self.close(code, reason)
        return ConnectionLost(code, reason)

    def _parse(self) -> list[Event]:
        """Handle the whole frames received (read by ``frames.scan``). DATA and WNDINC on
        open streams are handled inline (what bulk transfers are made of); consecutive DATA
        frames of one stream become one ``DataReceived``; anything else goes through
        ``frames.check`` and ``_handle``."""
        rx, streams = self._rx, self._streams
        events: list[Event] = []
        view, pos, end, max_body = rx.view, rx.start, rx.end, self._max_body
        opened: dict[int, _Stream] = {}  # streams whose send window grew
        run = _Run(events)  # DATA bodies of one stream not yet made an event
        need = 8
        try:
            while end - pos >= 8:
                word, sid, at, stop = scan(view, pos, max_body)
                if stop > end:
                    need = stop - pos
                    break
                pos = stop
                if word == _WNDINC_HEAD and self._window(sid, _U32_AT(view, at)[0], opened):
                    continue
                if word & 0xFF == _DATA_WORD:  # DATA without flags
                    s = streams.get(sid)
                    if s is not None and s.remote_open and pos - at <= s.recv_window:
                        if pos > at:
                            s.recv_window -= pos - at
                            run.add(sid, view[at:pos])
                        continue
                run.end()
                body = view[at:pos].tobytes()
                ftype, flags = (word >> 4) & 0xF, word & 0xF
                if ftype == DATA_T and sid:  # SYN or FIN, or not for an open stream
                    self._on_data(sid, flags, body, events)
                else:
                    events += self._handle(frames.check(ftype, sid, body), flags, sid, body)
        except ProtocolError as exc:
            run.end()
            rx.clear()
            events.append(self._fail(exc.code, str(exc)))
            return events
        run.end()
        rx.parsed(pos, need)
        if opened and not self.closed:
            # Several increments in one read: the data they release goes out once.
            for sid, s in opened.items():
                if streams.get(sid) is s:
                    self._flush(sid, s)
                    events.append(WindowOpened(sid))
        return events

    def _window(self, sid: int, increment: int, opened: dict[int, _Stream]) -> bool:
        """A WNDINC without flags, handled inline when it is valid (else False: ``_handle``
        gives the error); its stream's data goes out once the read is parsed."""
        s = self._streams.get(sid)
        if not sid or not 0 < increment <= MAX_INCREMENT or (
                s is not None and s.send_window + increment > MAX_INCREMENT):
            return False
        if s is not None:
            s.send_window += increment
            opened[sid] = s
        return True

    def _handle(self, kind: FrameType, flags: int, sid: int, body: bytes) -> list[Event]:
        if kind == FrameType.WNDINC:  # one the inline path left (flags, an overflow)
            s = self._streams.get(sid)
            if s is None:
                return []
            s.send_window += U32.unpack(body)[0]
            if s.send_window > MAX_INCREMENT:
                self.reset(sid, ErrorCode.FLOW_CONTROL)
                return [StreamReset(sid, ErrorCode.FLOW_CONTROL, False)]
            self._flush(sid, s)
            return [WindowOpened(sid)]
        if kind == FrameType.RST:
            if self._pop(sid) is None:
                return []
            return [StreamReset(sid, error_code(U32.unpack(body)[0]), True)]
        self.peer_gone = True
        last, code = HEADER.unpack_from(body)
        return [GoAway(last, error_code(code), body[8:].decode(errors="replace"))]

    def _peer_parity(self, stream_id: int) -> bool:
        return stream_id % 2 == (0 if self.client else 1)

    def _accept(self, stream_id: int, events: list[Event]) -> None:
        # Ids need not arrive in order: SYN rides on a stream's first write, and a peer may
        # write on a later stream first.
        if not self._peer_parity(stream_id):
            raise ProtocolError(ErrorCode.PROTOCOL, f"peer opened stream {stream_id}, "
                                "an id of ours")
        self._last_peer_id = max(self._last_peer_id, stream_id)
        if self.peer_gone or len(self._streams) >= self.max_streams \
                or self._peer_streams >= self.max_peer_streams:
            self.refused += 1
            if self.max_refused is not None and self.refused > self.max_refused:
                raise ProtocolError(ErrorCode.ENHANCE_YOUR_CALM,
                                    f"more than {self.max_refused} streams refused")
            self._emit(frames.rst(stream_id, ErrorCode.STREAM_REFUSED))
            return
        self._peer_streams += 1
        self._streams[stream_id] = _Stream(self.window, self.window, syn_sent=True)
        events.append(StreamOpened(stream_id))

    def _on_data(self, stream_id: int, flags: int, body: bytes, events: list[Event]) -> None:
        if flags & SYN and stream_id not in self._streams:
            self._accept(stream_id, events)
        s = self._streams.get(stream_id)
        if s is None:
            if stream_id > self._last_peer_id and self._peer_parity(stream_id):
                raise ProtocolError(ErrorCode.PROTOCOL, f"DATA before SYN on {stream_id}")
            return  # a stream we already reset or refused: drop quietly
        if not s.remote_open:
            self.reset(stream_id, ErrorCode.STREAM_CLOSED)
            events.append(StreamReset(stream_id, ErrorCode.STREAM_CLOSED, False))
            return
        if len(body) > s.recv_window:
            self.reset(stream_id, ErrorCode.FLOW_CONTROL)
            events.append(StreamReset(stream_id, ErrorCode.FLOW_CONTROL, False))
            return
        s.recv_window -= len(body)
        if body:
            events.append(DataReceived(stream_id, body))
        if flags & FIN:
            s.remote_open = False
            events.append(StreamEnded(stream_id))
            self._reap(stream_id, s)

    # ---- internals --------------------------------------------------------------------

    def _emit(self, frame: Frame) -> None:
        self._out.append(frames.encode(frame))

    def _flush(self, stream_id: int, s: _Stream) -> None:
        pending, out = s.pending, self._out
        while s.pending_size and s.send_window > 0:
            if s.send_window < min(s.pending_size, self._min_send):
                break  # no slivers: more window is on its way (see the module docstring)
            n = min(s.pending_size, s.send_window, MAX_CHUNK)
            s.pending_size -= n
            s.send_window -= n
            last = s.fin_queued and not s.pending_size
            flags = (FIN if last else 0) | (0 if s.syn_sent else SYN)
            out.append(HEADER.pack((n << 8) | _DATA_WORD | flags, stream_id))
            self._out_data += n
            while n:
                chunk = pending[0]
                if len(chunk) <= n:
                    pending.popleft()
                    out.append(chunk)
                    n -= len(chunk)
                else:
                    view = memoryview(chunk)
                    out.append(view[:n])
                    pending[0] = view[n:]
                    n = 0
            s.syn_sent = True
            s.fin_sent = s.fin_sent or last
        if s.fin_queued and not s.pending_size and not s.fin_sent:
            self._emit(frames.data(stream_id, syn=not s.syn_sent, fin=True))
            s.syn_sent = s.fin_sent = True
        if s.fin_sent:
            s.local_open = False
            self._reap(stream_id, s)

    def _reap(self, stream_id: int, s: _Stream) -> None:
        if not s.local_open and not s.remote_open:
            self._pop(stream_id)

    def _pop(self, stream_id: int) -> _Stream | None:
        s = self._streams.pop(stream_id, None)
        if s is not None and self._peer_parity(stream_id):
            self._peer_streams -= 1
        return s


class _Run:
    """Bodies of consecutive DATA frames of one stream, made one ``DataReceived`` when a
    frame of another kind or stream comes, or the read is parsed."""

    __slots__ = ("events", "parts", "sid")

    def __init__(self, events: list[Event]) -> None:
        self.events, self.sid, self.parts = events, 0, list[memoryview]()

    def add(self, sid: int, body: memoryview) -> None:
        if self.parts and sid != self.sid:
            self.end()
        self.sid = sid
        self.parts.append(body)

    def end(self) -> None:
        parts = self.parts
        if parts:
            self.events.append(DataReceived(
                self.sid, parts[0].tobytes() if len(parts) == 1 else b"".join(parts)))
            self.parts = []
