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

from edgeway.tunnel.muxado.core import DATA_WORD, MAX_CHUNK, WNDINC_HEAD, StreamState
from edgeway.tunnel.muxado.events import StreamError
from edgeway.tunnel.muxado.frames import FIN, HEADER, SYN, U32
from edgeway.tunnel.muxado.receive import Receiver


class Session(Receiver):
    """One end of a muxado connection (see the module docstring)."""

    # ---- application side -------------------------------------------------------------

    def open_stream(self) -> int:
        if self.closed or self.peer_gone:
            raise StreamError("the session is closing")
        if len(self._streams) >= self.max_streams:
            raise StreamError("too many open streams")
        sid = self._next_id
        self._next_id += 2
        self._streams[sid] = StreamState(self.window, self.window)
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
                self._out += (HEADER.pack((n << 8) | DATA_WORD | flags, stream_id), data)
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
            self._out.append(HEADER.pack(WNDINC_HEAD, stream_id) + U32.pack(s.unacked))
            s.unacked = 0

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
        self._out_data = self.refused_unsent = 0
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
