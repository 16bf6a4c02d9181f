"""muxado frames: an 8-byte header (24-bit body length, 4-bit type, 4-bit flags, 32-bit stream
id with the top bit reserved), then the body. Sans-I/O: ``Decoder.feed`` takes bytes as they
arrive and returns whole frames; ``encode`` turns a frame into bytes.

Bodies are checked here (sizes, stream id 0 only for GOAWAY); anything malformed is a
``ProtocolError`` carrying the error code to send in the GOAWAY that ends the session.

The session's data path builds no ``Frame`` objects: ``header`` packs a header to send in front
of a body the caller already holds, and received bytes wait in a ``FrameBuffer`` (into which
TLS can decrypt in place) that the session parses itself.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Final

MAX_STREAM_ID: Final = 0x7FFFFFFF
MAX_INCREMENT: Final = 0x7FFFFFFF
MAX_LENGTH: Final = 0xFFFFFF
FIN: Final = 0x1
SYN: Final = 0x2

HEADER = struct.Struct(">II")
U32 = struct.Struct(">I")
_unpack_header = HEADER.unpack_from


class FrameType(IntEnum):
    RST = 0
    DATA = 1
    WNDINC = 2
    GOAWAY = 3


DATA_T: Final = 1  # a plain int for the hot path: comparing with an IntEnum member costs more


class ErrorCode(IntEnum):
    NONE = 0
    PROTOCOL = 1
    INTERNAL = 2
    FLOW_CONTROL = 3
    STREAM_CLOSED = 4
    STREAM_REFUSED = 5
    STREAM_CANCELLED = 6
    STREAM_RESET = 7
    FRAME_SIZE = 8
    ACCEPT_QUEUE_FULL = 9
    ENHANCE_YOUR_CALM = 10
    REMOTE_GONE_AWAY = 11
    STREAMS_EXHAUSTED = 12
    WRITE_TIMEOUT = 13
    SESSION_CLOSED = 14
    PEER_EOF = 15


class ProtocolError(Exception):
    def __init__(self, code: ErrorCode, msg: str) -> None:
        super().__init__(msg)
        self.code = code


def error_code(raw: int) -> ErrorCode:
    try:
        return ErrorCode(raw)
    except ValueError:
        return ErrorCode.INTERNAL


@dataclass(frozen=True, slots=True)
class Frame:
    type: FrameType
    stream_id: int
    body: bytes = b""
    flags: int = 0

    @property
    def fin(self) -> bool:
        return bool(self.flags & FIN)

    @property
    def syn(self) -> bool:
        return bool(self.flags & SYN)

    def code(self) -> ErrorCode:
        """The error code of an RST (body) or GOAWAY (second word of the body)."""
        return error_code(U32.unpack_from(self.body, 4 if self.type == FrameType.GOAWAY else 0)[0])

    def increment(self) -> int:
        value: int = U32.unpack(self.body)[0]
        return value


def header(ftype: int, flags: int, stream_id: int, length: int) -> bytes:
    """The 8 header bytes of a frame whose body (``length`` bytes) the caller sends after."""
    if length > MAX_LENGTH:
        raise ValueError("frame body over 16 MiB")
    return HEADER.pack((length << 8) | (ftype << 4) | (flags & 0xF), stream_id & MAX_STREAM_ID)


def encode(frame: Frame) -> bytes:
    return header(frame.type, frame.flags, frame.stream_id, len(frame.body)) + frame.body


def data(stream_id: int, payload: bytes = b"", *, syn: bool = False, fin: bool = False) -> Frame:
    return Frame(FrameType.DATA, stream_id, payload, (SYN if syn else 0) | (FIN if fin else 0))


def rst(stream_id: int, code: ErrorCode) -> Frame:
    return Frame(FrameType.RST, stream_id, U32.pack(code))


def wndinc(stream_id: int, increment: int) -> Frame:
    return Frame(FrameType.WNDINC, stream_id, U32.pack(increment))


def goaway(last_stream_id: int, code: ErrorCode, msg: str = "") -> Frame:
    return Frame(FrameType.GOAWAY, 0, HEADER.pack(last_stream_id, code) + msg.encode())


def check(ftype: int, stream_id: int, body: bytes) -> FrameType:
    """The type of a frame with this header and body, or the ProtocolError it is."""
    if ftype > FrameType.GOAWAY:
        raise ProtocolError(ErrorCode.PROTOCOL, f"unknown frame type {ftype}")
    kind = FrameType(ftype)
    if kind == FrameType.GOAWAY:
        if stream_id != 0 or len(body) < 8:
            raise ProtocolError(ErrorCode.PROTOCOL, "GOAWAY needs stream 0 and an 8-byte body")
        return kind
    if stream_id == 0:
        raise ProtocolError(ErrorCode.PROTOCOL, f"{kind.name} on stream 0")
    if kind in (FrameType.RST, FrameType.WNDINC) and len(body) != 4:
        raise ProtocolError(ErrorCode.FRAME_SIZE, f"{kind.name} body must be 4 bytes")
    if kind == FrameType.WNDINC and not 0 < U32.unpack(body)[0] <= MAX_INCREMENT:
        raise ProtocolError(ErrorCode.PROTOCOL, "window increment out of range")
    return kind


RawFrame = tuple[int, int, int, bytes]  # type, flags, stream id, body

INITIAL_BUFFER: Final = 64 * 1024
MIN_FREE: Final = 32 * 1024  # less room than this at the end of the buffer: move or grow first
MAX_BUFFER: Final = 1 << 20  # grown no further than this (or than one whole frame)
SHRINK_AFTER: Final = 64  # small reads in a row on an empty grown buffer: back to the initial size


class FrameBuffer:
    """Received bytes until they make whole frames: ``view[start:end]``, of which the frame at
    ``start`` needs ``need`` bytes. Bytes may land here in place (``get_buffer``, then ``end +=
    n``, the shape of ``asyncio.BufferedProtocol``) or be copied in (``fill``); a parser reads
    frames off ``view`` and reports where it stopped with ``parsed``.

    The buffer is never resized in place (whoever wrote into it may still hold a view): the
    unparsed tail is moved to its front, or into a bigger buffer when the next frame would not
    fit (or the reads are large: TLS asks for room for what it has); a grown buffer that has
    only seen small reads for a while is replaced by a small one."""

    def __init__(self) -> None:
        self.buf = bytearray(INITIAL_BUFFER)
        self.view = memoryview(self.buf)
        self.start = 0
        self.end = 0
        self.need = 8
        self._small_reads = 0
        self.max_room: int | None = None  # set: reads get at most this much room

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """Writable room for the next bytes (at least ``sizehint`` when that is sensible)."""
        start, end, size, need = self.start, self.end, len(self.buf), self.need
        room = max(MIN_FREE, sizehint if self.max_room is None else min(sizehint,
                                                                          self.max_room))
        if size > INITIAL_BUFFER and not end:
            self._small_reads = self._small_reads + 1 if room == MIN_FREE else 0
            if self._small_reads > SHRINK_AFTER and need + MIN_FREE <= INITIAL_BUFFER:
                self._small_reads = 0
                self.buf = bytearray(INITIAL_BUFFER)
                self.view = memoryview(self.buf)
                return self.view
        if size - end >= room and start + need <= size:
            return self.view[end:]
        tail = end - start  # an incomplete frame: shorter than ``need``
        if tail + room > size or need > size:
            # Grow (a power of two): room for the read asked for and the whole next frame.
            target, limit = max(tail + room, need + MIN_FREE), max(MAX_BUFFER, need + MIN_FREE)
            new = size
            while new < min(target, limit):
                new *= 2
            buf = bytearray(new)
            buf[:tail] = self.view[start:end]
            self.buf, self.view = buf, memoryview(buf)
        else:
            self.buf[:tail] = self.view[start:end]  # same size: no resize, views stay valid
        self.start, self.end = 0, tail
        return self.view[tail:]

    def fill(self, src: memoryview) -> int:
        """Copy in as much of ``src`` as there is room for (at least ``MIN_FREE`` bytes)."""
        room = self.get_buffer(len(src))
        n = min(len(room), len(src))
        room[:n] = src[:n]
        self.end += n
        return n

    def parsed(self, pos: int, need: int) -> None:
        """Frames up to ``pos`` are taken; the next one needs ``need`` bytes in all."""
        if pos == self.end:
            self.start = self.end = 0
        else:
            self.start = pos
        self.need = need

    def clear(self) -> None:
        self.start = self.end = 0
        self.need = 8


class Decoder:
    """Incremental decoder: feed bytes, get whole frames; a body over ``max_body`` bytes is a
    FRAME_SIZE error (peers send at most one window of data per frame)."""

    def __init__(self, max_body: int = 1 << 20) -> None:
        self._max_body = max_body
        self._rx = FrameBuffer()

    def feed(self, chunk: bytes | bytearray | memoryview) -> list[Frame]:
        return [Frame(FrameType(t), sid, body, flags)
                for t, flags, sid, body in self.feed_raw(chunk)]

    def feed_raw(self, chunk: bytes | bytearray | memoryview) -> list[RawFrame]:
        """Like ``feed``, without building ``Frame`` objects."""
        src = memoryview(chunk).cast("B")
        out: list[RawFrame] = []
        while True:
            n = self._rx.fill(src) if src else 0
            try:
                out += self._frames()
            except ProtocolError:
                self._rx.clear()
                raise
            src = src[n:]
            if not src:
                return out

    def _frames(self) -> list[RawFrame]:
        rx = self._rx
        view, pos, end, max_body = rx.view, rx.start, rx.end, self._max_body
        out: list[RawFrame] = []
        need = 8
        while end - pos >= 8:
            word, stream_id, at, stop = scan(view, pos, max_body)
            if stop > end:
                need = stop - pos
                break
            body = view[at:stop].tobytes()
            pos = stop
            ftype = (word >> 4) & 0xF
            check(ftype, stream_id, body)
            out.append((ftype, word & 0xF, stream_id, body))
        rx.parsed(pos, need)
        return out


def scan(view: memoryview, pos: int, max_body: int) -> tuple[int, int, int, int]:
    """The frame whose header starts at ``pos`` (8 bytes there at least): (its header word:
    length, type and flags; its stream id; where its body starts; where it ends, which may be
    past the bytes received: then the frame is not whole yet). A body over ``max_body`` bytes
    is a FRAME_SIZE error. The one frame reader: ``Decoder`` and the session's parser."""
    word, stream_id = _unpack_header(view, pos)
    length = word >> 8
    if length > max_body:
        raise ProtocolError(ErrorCode.FRAME_SIZE, f"frame body of {length} bytes")
    return word, stream_id & MAX_STREAM_ID, pos + 8, pos + 8 + length
