"""The wire side of a muxado session: bytes from the peer parsed into frames (by
``frames.scan``) and handled, returning events. DATA and WNDINC on open streams are handled
inline, what bulk transfers are made of (see "Cost" in ``session``)."""

from __future__ import annotations

from typing import Final

from edgeway.tunnel.muxado import frames
from edgeway.tunnel.muxado.core import DATA_WORD, WNDINC_HEAD, SessionCore, StreamState
from edgeway.tunnel.muxado.events import (
    DataReceived,
    Event,
    GoAway,
    StreamEnded,
    StreamOpened,
    StreamReset,
    WindowOpened,
)
from edgeway.tunnel.muxado.frames import (
    DATA_T,
    FIN,
    HEADER,
    MAX_INCREMENT,
    SYN,
    U32,
    ErrorCode,
    FrameType,
    ProtocolError,
    error_code,
    scan,
)

_U32_AT = U32.unpack_from
# Streams refused (an RST each) while the output was not taken, at most: the peer is not
# reading our answers, and would make them pile up in memory (about 50 KiB of them).
MAX_REFUSED_UNSENT: Final = 4096


class Receiver(SessionCore):
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

    def _parse(self) -> list[Event]:
        """Handle the whole frames received (read by ``frames.scan``). DATA and WNDINC on
        open streams are handled inline (what bulk transfers are made of); consecutive DATA
        frames of one stream become one ``DataReceived``; anything else goes through
        ``frames.check`` and ``_handle``."""
        rx, streams = self._rx, self._streams
        events: list[Event] = []
        view, pos, end, max_body = rx.view, rx.start, rx.end, self._max_body
        opened: dict[int, StreamState] = {}  # streams whose send window grew
        run = _Run(events)  # DATA bodies of one stream not yet made an event
        need = 8
        try:
            while end - pos >= 8:
                word, sid, at, stop = scan(view, pos, max_body)
                if stop > end:
                    need = stop - pos
                    break
                pos = stop
                if word == WNDINC_HEAD and self._window(sid, _U32_AT(view, at)[0], opened):
                    continue
                if word & 0xFF == DATA_WORD:  # DATA without flags
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

    def _window(self, sid: int, increment: int, opened: dict[int, StreamState]) -> bool:
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
            self.refused_unsent += 1
            if self.max_refused is not None and self.refused > self.max_refused:
                raise ProtocolError(ErrorCode.ENHANCE_YOUR_CALM,
                                    f"more than {self.max_refused} streams refused")
            if self.refused_unsent > MAX_REFUSED_UNSENT:  # (a peer that does not read what
                raise ProtocolError(  # we answer cannot make us queue without bound)
                    ErrorCode.ENHANCE_YOUR_CALM, f"more than {MAX_REFUSED_UNSENT} streams "
                    "refused while the answers to them were not read")
            self._emit(frames.rst(stream_id, ErrorCode.STREAM_REFUSED))
            return
        self._peer_streams += 1
        self._streams[stream_id] = StreamState(self.window, self.window, syn_sent=True)
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
