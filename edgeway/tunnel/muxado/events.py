"""What a muxado ``Session`` reports (its events) and raises (``StreamError``). (Each
dataclass has its ``__init__`` written out: compiled, the one dataclass generates runs
interpreted, and events are made for every frame.)"""

from __future__ import annotations

from dataclasses import dataclass

from edgeway.tunnel.muxado.frames import ErrorCode


@dataclass(slots=True)
class StreamOpened:
    stream_id: int

    def __init__(self, stream_id: int) -> None:
        self.stream_id = stream_id


@dataclass(slots=True)
class DataReceived:
    stream_id: int
    data: bytes

    def __init__(self, stream_id: int, data: bytes) -> None:
        self.stream_id, self.data = stream_id, data


@dataclass(slots=True)
class StreamEnded:
    """The peer half-closed (FIN): no more data will arrive on this stream."""

    stream_id: int

    def __init__(self, stream_id: int) -> None:
        self.stream_id = stream_id


@dataclass(slots=True)
class StreamReset:
    stream_id: int
    code: ErrorCode
    by_peer: bool

    def __init__(self, stream_id: int, code: ErrorCode, by_peer: bool) -> None:
        self.stream_id, self.code, self.by_peer = stream_id, code, by_peer


@dataclass(slots=True)
class WindowOpened:
    """The peer granted window: pending data of this stream may have been sent."""

    stream_id: int

    def __init__(self, stream_id: int) -> None:
        self.stream_id = stream_id


@dataclass(slots=True)
class GoAway:
    last_stream_id: int
    code: ErrorCode
    message: str

    def __init__(self, last_stream_id: int, code: ErrorCode, message: str) -> None:
        self.last_stream_id, self.code, self.message = last_stream_id, code, message


@dataclass(slots=True)
class ConnectionLost:
    code: ErrorCode
    reason: str

    def __init__(self, code: ErrorCode, reason: str) -> None:
        self.code, self.reason = code, reason


Event = StreamOpened | DataReceived | StreamEnded | StreamReset | WindowOpened | GoAway | \
    ConnectionLost


class StreamError(Exception):
    """The application used a stream that is not open in that direction."""
