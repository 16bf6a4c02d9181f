"""muxado frames: an 8-byte header (24-bit body length, 4-bit type, 4-bit flags, 32-bit stream
id with the top bit reserved), then the body. Sans-I/O: ``Decoder.feed`` takes bytes as they
arrive and returns whole frames; ``encode`` turns a frame into bytes.

Bodies are checked here (sizes, stream id 0 only for GOAWAY); anything malformed is a
``ProtocolError`` carrying the error code to send in the GOAWAY that ends the session.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

MAX_STREAM_ID = 0x7FFFFFFF
MAX_INCREMENT = 0x7FFFFFFF
FIN = 0x1
SYN = 0x2


class FrameType(IntEnum):
    RST = 0
    DATA = 1
    WNDINC = 2
    GOAWAY = 3


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


@dataclass(frozen=True)
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
        raw = struct.unpack_from(">I", self.body, 4 if self.type == FrameType.GOAWAY else 0)[0]
        try:
            return ErrorCode(raw)
        except ValueError:
            return ErrorCode.INTERNAL

    def increment(self) -> int:
        value: int = struct.unpack(">I", self.body)[0]
        return value


def encode(frame: Frame) -> bytes:
    length = len(frame.body)
    if length > 0xFFFFFF:
        raise ValueError("frame body over 16 MiB")
    word = (length << 8) | (int(frame.type) << 4) | (frame.flags & 0xF)
    return struct.pack(">II", word, frame.stream_id & MAX_STREAM_ID) + frame.body


def data(stream_id: int, payload: bytes = b"", *, syn: bool = False, fin: bool = False) -> Frame:
    return Frame(FrameType.DATA, stream_id, payload, (SYN if syn else 0) | (FIN if fin else 0))


def rst(stream_id: int, code: ErrorCode) -> Frame:
    return Frame(FrameType.RST, stream_id, struct.pack(">I", code))


def wndinc(stream_id: int, increment: int) -> Frame:
    return Frame(FrameType.WNDINC, stream_id, struct.pack(">I", increment))


def goaway(last_stream_id: int, code: ErrorCode, msg: str = "") -> Frame:
    return Frame(FrameType.GOAWAY, 0, struct.pack(">II", last_stream_id, code) + msg.encode())


def _check(ftype: int, stream_id: int, body: bytes) -> FrameType:
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
    if kind == FrameType.WNDINC and not 0 < struct.unpack(">I", body)[0] <= MAX_INCREMENT:
        raise ProtocolError(ErrorCode.PROTOCOL, "window increment out of range")
    return kind


class Decoder:
    """Incremental decoder: feed bytes, get whole frames; a body over ``max_body`` bytes is a
    FRAME_SIZE error (peers send at most one window of data per frame)."""

    def __init__(self, max_body: int = 1 << 20) -> None:
        self._buf = bytearray()
        self._max_body = max_body

    def feed(self, chunk: bytes) -> list[Frame]:
        self._buf += chunk
        out: list[Frame] = []
        while len(self._buf) >= 8:
            word, stream_id = struct.unpack_from(">II", self._buf)
            length = word >> 8
            if length > self._max_body:
                raise ProtocolError(ErrorCode.FRAME_SIZE, f"frame body of {length} bytes")
            if len(self._buf) < 8 + length:
                break
            body = bytes(self._buf[8:8 + length])
            del self._buf[:8 + length]
            ftype, flags = (word >> 4) & 0xF, word & 0xF
            stream_id &= MAX_STREAM_ID
            out.append(Frame(_check(ftype, stream_id, body), stream_id, body, flags))
        return out
