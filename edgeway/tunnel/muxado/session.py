"""The muxado session state machine, sans-I/O.

Theory of operation. A ``Session`` is one end of a multiplexed connection. Bytes from the
peer go in through ``receive``, which returns events (a stream opened, data, a half-close, a
reset, more send window, the peer going away). What the application wants to do (open a
stream, send, acknowledge consumed data, reset, close) is recorded, and the bytes to put on
the wire come out of ``data_to_send``. No sockets, no clocks, no tasks.

Streams. Ids of streams we open have our parity (a client's are odd from 3, a server's even
from 2). A stream comes to exist for the peer when its first DATA frame arrives with SYN; we
send SYN lazily with our first DATA frame. FIN half-closes one direction; a stream is gone
when both directions are closed, or at RST.

Flow control. Each direction of each stream has a window, 256 KiB unless configured, never
negotiated. We never send more than the peer's window: data past it waits in that stream's
own buffer, so a stalled stream never holds back another. The peer may send us at most our
window; ``consumed`` gives credit back (a WNDINC once enough has been consumed). A peer
overrunning our window gets that stream reset with FLOW_CONTROL.

Limits. At most ``max_streams`` open streams: a peer opening more gets STREAM_REFUSED. A
malformed frame ends the session: a GOAWAY with the error is queued and ``ConnectionLost`` is
returned; the shell then flushes and closes the transport.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from edgeway.tunnel.muxado import frames
from edgeway.tunnel.muxado.frames import ErrorCode, Frame, FrameType, ProtocolError

WINDOW = 256 * 1024
MAX_CHUNK = 16 * 1024


@dataclass(frozen=True)
class StreamOpened:
    stream_id: int


@dataclass(frozen=True)
class DataReceived:
    stream_id: int
    data: bytes


@dataclass(frozen=True)
class StreamEnded:
    """The peer half-closed (FIN): no more data will arrive on this stream."""

    stream_id: int


@dataclass(frozen=True)
class StreamReset:
    stream_id: int
    code: ErrorCode
    by_peer: bool


@dataclass(frozen=True)
class WindowOpened:
    """The peer granted window: pending data of this stream may have been sent."""

    stream_id: int


@dataclass(frozen=True)
class GoAway:
    last_stream_id: int
    code: ErrorCode
    message: str


@dataclass(frozen=True)
class ConnectionLost:
    code: ErrorCode
    reason: str


Event = StreamOpened | DataReceived | StreamEnded | StreamReset | WindowOpened | GoAway | \
    ConnectionLost


@dataclass
class _Stream:
    send_window: int
    recv_window: int
    local_open: bool = True
    remote_open: bool = True
    syn_sent: bool = False
    pending: bytearray = field(default_factory=bytearray)
    fin_queued: bool = False
    fin_sent: bool = False
    unacked: int = 0  # consumed but not yet returned to the peer as window


class StreamError(Exception):
    """The application used a stream that is not open in that direction."""


class Session:
    def __init__(self, *, client: bool, window: int = WINDOW, max_streams: int = 512) -> None:
        self.client = client
        self.window = window
        self.max_streams = max_streams
        self._streams: dict[int, _Stream] = {}
        self._next_id = 3 if client else 2
        self._last_peer_id = 0
        self._out = bytearray()
        self._decoder = frames.Decoder(max_body=max(window, 1 << 16))
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

    def send(self, stream_id: int, data: bytes, *, fin: bool = False) -> None:
        s = self._streams.get(stream_id)
        if s is None or not s.local_open or s.fin_queued:
            raise StreamError(f"stream {stream_id} is not open for sending")
        s.pending += data
        s.fin_queued = fin
        self._flush(stream_id, s)

    def pending(self, stream_id: int) -> int:
        """Bytes accepted by ``send`` that wait for the peer's window."""
        s = self._streams.get(stream_id)
        return len(s.pending) if s else 0

    def consumed(self, stream_id: int, n: int) -> None:
        """The application has taken ``n`` received bytes: give the peer that window back."""
        s = self._streams.get(stream_id)
        if s is None or n <= 0:
            return
        s.unacked += n
        if s.unacked >= self.window // 4 or s.recv_window < self.window // 2:
            s.recv_window += s.unacked
            self._emit(frames.wndinc(stream_id, s.unacked))
            s.unacked = 0

    def reset(self, stream_id: int, code: ErrorCode = ErrorCode.STREAM_CANCELLED) -> None:
        if self._streams.pop(stream_id, None) is not None:
            self._emit(frames.rst(stream_id, code))

    def close(self, code: ErrorCode = ErrorCode.NONE, message: str = "") -> None:
        if not self.closed:
            self.closed = True
            self._emit(frames.goaway(self._last_peer_id, code, message))

    def data_to_send(self) -> bytes:
        out = bytes(self._out)
        self._out.clear()
        return out

    def is_open(self, stream_id: int) -> bool:
        return stream_id in self._streams

    # ---- wire side --------------------------------------------------------------------

    def receive(self, data: bytes) -> list[Event]:
        if self.closed:
            return []
        try:
            decoded = self._decoder.feed(data)
        except ProtocolError as exc:
            return [self._fail(exc.code, str(exc))]
        events: list[Event] = []
        for frame in decoded:
            try:
                events += self._handle(frame)
            except ProtocolError as exc:
                events.append(self._fail(exc.code, str(exc)))
                break
        return events

    def _fail(self, code: ErrorCode, reason: str) -> ConnectionLost:
        self.close(code, reason)
        return ConnectionLost(code, reason)

    def _handle(self, f: Frame) -> list[Event]:
        if f.type == FrameType.DATA:
            return self._on_data(f)
        if f.type == FrameType.WNDINC:
            return self._on_wndinc(f)
        if f.type == FrameType.RST:
            s = self._streams.pop(f.stream_id, None)
            return [StreamReset(f.stream_id, f.code(), True)] if s else []
        self.peer_gone = True
        last = int.from_bytes(f.body[:4], "big")
        return [GoAway(last, f.code(), f.body[8:].decode(errors="replace"))]

    def _peer_parity(self, stream_id: int) -> bool:
        return stream_id % 2 == (0 if self.client else 1)

    def _accept(self, f: Frame) -> list[Event]:
        # Ids need not arrive in order: SYN rides on a stream's first write, and a peer may
        # write on a later stream first.
        if not self._peer_parity(f.stream_id):
            raise ProtocolError(ErrorCode.PROTOCOL, f"peer opened stream {f.stream_id}, "
                                "an id of ours")
        self._last_peer_id = max(self._last_peer_id, f.stream_id)
        if self.peer_gone or len(self._streams) >= self.max_streams:
            self._emit(frames.rst(f.stream_id, ErrorCode.STREAM_REFUSED))
            return []
        self._streams[f.stream_id] = _Stream(self.window, self.window, syn_sent=True)
        return [StreamOpened(f.stream_id)]

    def _on_data(self, f: Frame) -> list[Event]:
        events: list[Event] = []
        if f.syn and f.stream_id not in self._streams:
            events += self._accept(f)
        s = self._streams.get(f.stream_id)
        if s is None:
            if f.stream_id > self._last_peer_id and self._peer_parity(f.stream_id):
                raise ProtocolError(ErrorCode.PROTOCOL, f"DATA before SYN on {f.stream_id}")
            return events  # a stream we already reset or refused: drop quietly
        if not s.remote_open:
            self.reset(f.stream_id, ErrorCode.STREAM_CLOSED)
            return [*events, StreamReset(f.stream_id, ErrorCode.STREAM_CLOSED, False)]
        if len(f.body) > s.recv_window:
            self.reset(f.stream_id, ErrorCode.FLOW_CONTROL)
            return [*events, StreamReset(f.stream_id, ErrorCode.FLOW_CONTROL, False)]
        s.recv_window -= len(f.body)
        if f.body:
            events.append(DataReceived(f.stream_id, f.body))
        if f.fin:
            s.remote_open = False
            events.append(StreamEnded(f.stream_id))
            self._reap(f.stream_id, s)
        return events

    def _on_wndinc(self, f: Frame) -> list[Event]:
        s = self._streams.get(f.stream_id)
        if s is None:
            return []
        s.send_window += f.increment()
        if s.send_window > frames.MAX_INCREMENT:
            self.reset(f.stream_id, ErrorCode.FLOW_CONTROL)
            return [StreamReset(f.stream_id, ErrorCode.FLOW_CONTROL, False)]
        self._flush(f.stream_id, s)
        return [WindowOpened(f.stream_id)]

    # ---- internals --------------------------------------------------------------------

    def _emit(self, frame: Frame) -> None:
        self._out += frames.encode(frame)

    def _flush(self, stream_id: int, s: _Stream) -> None:
        while s.pending and s.send_window > 0:
            n = min(len(s.pending), s.send_window, MAX_CHUNK)
            chunk = bytes(s.pending[:n])
            del s.pending[:n]
            s.send_window -= n
            last = s.fin_queued and not s.pending
            self._emit(frames.data(stream_id, chunk, syn=not s.syn_sent, fin=last))
            s.syn_sent = True
            s.fin_sent = s.fin_sent or last
        if s.fin_queued and not s.pending and not s.fin_sent:
            self._emit(frames.data(stream_id, syn=not s.syn_sent, fin=True))
            s.syn_sent = s.fin_sent = True
        if s.fin_sent:
            s.local_open = False
            self._reap(stream_id, s)

    def _reap(self, stream_id: int, s: _Stream) -> None:
        if not s.local_open and not s.remote_open:
            self._streams.pop(stream_id, None)
