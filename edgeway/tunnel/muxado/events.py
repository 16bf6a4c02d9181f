"""What a muxado ``Session`` reports (its events) and raises (``StreamError``)."""

from __future__ import annotations

from dataclasses import dataclass

from edgeway.tunnel.muxado.frames import ErrorCode


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


class StreamError(Exception):
    """The application used a stream that is not open in that direction."""
