"""The state a muxado session keeps (its streams, what it owes the wire) and the moves both of
its sides make on it: emitting frames, sending what a stream's window lets out, resetting,
closing, forgetting ended streams. ``receive.Receiver`` adds the wire side on top, and
``session.Session`` the application side; the theory of operation is in ``session``."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Final

from edgeway.tunnel.muxado import frames
from edgeway.tunnel.muxado.events import ConnectionLost
from edgeway.tunnel.muxado.frames import FIN, HEADER, SYN, ErrorCode, Frame, FrameType

WINDOW: Final = 256 * 1024
MAX_CHUNK: Final = 64 * 1024
MIN_SEND: Final = 32 * 1024

DATA_WORD: Final = FrameType.DATA << 4
WNDINC_HEAD: Final = (4 << 8) | (FrameType.WNDINC << 4)


@dataclass(slots=True)
class StreamState:
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

    def __init__(self, send_window: int, recv_window: int, local_open: bool = True,
                 remote_open: bool = True, syn_sent: bool = False,
                 pending: deque[bytes | memoryview] | None = None, pending_size: int = 0,
                 fin_queued: bool = False, fin_sent: bool = False, unacked: int = 0) -> None:
        # (written out: compiled, the one dataclass generates runs interpreted)
        self.send_window, self.recv_window = send_window, recv_window
        self.local_open, self.remote_open, self.syn_sent = local_open, remote_open, syn_sent
        self.pending = deque() if pending is None else pending
        self.pending_size, self.fin_queued, self.fin_sent = pending_size, fin_queued, fin_sent
        self.unacked = unacked


class SessionCore:
    def __init__(self, *, client: bool, window: int = WINDOW, max_streams: int = 512,
                 fin_before_rst: bool | None = None) -> None:
        self.client = client
        # A server's peers are the SDKs (see "Resets" in ``session``); our own agent, a
        # client, sends a bare RST, which the server reads as an abort even after a
        # half-close.
        self.fin_before_rst = not client if fin_before_rst is None else fin_before_rst
        self.window = window
        self.max_streams = max_streams
        self.max_peer_streams = max_streams
        self._peer_streams = 0
        self.max_refused: int | None = None  # set: refusing more ends the session
        self.refused = 0
        self.refused_unsent = 0  # refusals (RSTs) queued since the output was last taken
        self._streams: dict[int, StreamState] = {}
        self._next_id = 3 if client else 2
        self._last_peer_id = 0
        self._out: list[bytes | memoryview] = []
        self._out_data = 0  # DATA payload bytes in ``_out``
        self._rx = frames.FrameBuffer()
        self._max_body = self._full_body = max(window, 1 << 16)  # bigger: FRAME_SIZE error
        self._min_send = max(1, min(MIN_SEND, window // 8))
        self.closed = False
        self.peer_gone = False

    def reset(self, stream_id: int, code: ErrorCode = ErrorCode.STREAM_CANCELLED) -> bool:
        """Abort a stream: a FIN (unless sent already), then RST. Returns whether the peer may
        still hold the stream (it had not half-closed): see "Resets" in ``session``.
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

    def _fail(self, code: ErrorCode, reason: str) -> ConnectionLost:
        self.close(code, reason)
        return ConnectionLost(code, reason)

    def _peer_parity(self, stream_id: int) -> bool:
        return stream_id % 2 == (0 if self.client else 1)

    def _emit(self, frame: Frame) -> None:
        self._out.append(frames.encode(frame))

    def _flush(self, stream_id: int, s: StreamState) -> None:
        pending, out = s.pending, self._out
        while s.pending_size and s.send_window > 0:
            if s.send_window < min(s.pending_size, self._min_send):
                break  # no slivers: more window is on its way (see ``session``)
            n = min(s.pending_size, s.send_window, MAX_CHUNK)
            s.pending_size -= n
            s.send_window -= n
            last = s.fin_queued and not s.pending_size
            flags = (FIN if last else 0) | (0 if s.syn_sent else SYN)
            out.append(HEADER.pack((n << 8) | DATA_WORD | flags, stream_id))
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

    def _reap(self, stream_id: int, s: StreamState) -> None:
        if not s.local_open and not s.remote_open:
            self._pop(stream_id)

    def _pop(self, stream_id: int) -> StreamState | None:
        s = self._streams.pop(stream_id, None)
        if s is not None and self._peer_parity(stream_id):
            self._peer_streams -= 1
        return s
