"""The RPC layer on muxado streams: the 4-byte stream type, then one JSON request and one JSON
reply. Both SDK dialects are served: the Rust SDK sends JSON without a newline and reads the
reply until EOF (so every reply is followed by FIN); the Go SDK sends a newline and decodes one
value. Keys are matched without regard to case; replies use the Rust spellings."""

from __future__ import annotations

import json
import struct
from enum import IntEnum
from typing import Any

from edgeway.tunnel.muxado.stream import MuxStream

MAX_MESSAGE = 1 << 20


class StreamType(IntEnum):
    AUTH = 0
    BIND = 1
    UNBIND = 2
    PROXY = 3
    RESTART = 4
    STOP = 5
    UPDATE = 6
    START_TUNNEL_WITH_LABEL = 7
    SRV_INFO = 8
    STOP_TUNNEL = 9
    PATCH_TUNNEL_STATE = 10
    HEARTBEAT = 0xFFFFFFFF


class RPCError(Exception):
    pass


def folded(value: Any) -> Any:
    """``value`` with every object key lower-cased (the Go SDK decodes keys that way)."""
    if isinstance(value, dict):
        return {str(k).lower(): folded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [folded(v) for v in value]
    return value


def try_decode(buf: bytes) -> dict[str, Any] | None:
    """The JSON object at the start of ``buf`` once it is complete, else None."""
    try:
        text = buf.decode()
    except UnicodeDecodeError:
        return None  # a multi-byte character cut in two: wait for the rest
    try:
        value, _ = json.JSONDecoder().raw_decode(text.lstrip())
    except ValueError:
        return None
    if not isinstance(value, dict):
        raise RPCError("an RPC message must be a JSON object")
    return value


async def read_type(stream: MuxStream) -> int:
    raw: int = struct.unpack(">I", await stream.readexactly(4))[0]
    return raw


async def read_message(stream: MuxStream) -> dict[str, Any]:
    """One JSON object, decoded as soon as it is complete (the Rust SDK does not FIN)."""
    buf = bytearray()
    while True:
        chunk = await stream.read()
        if not chunk:
            value = try_decode(bytes(buf))
            if value is None:
                raise RPCError("the stream ended before a complete JSON message")
            return value
        buf += chunk
        if len(buf) > MAX_MESSAGE:
            raise RPCError("RPC message over 1 MiB")
        value = try_decode(bytes(buf))
        if value is not None:
            return value


async def reply(stream: MuxStream, message: dict[str, Any]) -> None:
    await stream.write(json.dumps(message).encode(), eof=True)


def error_text(msg: str, code: int) -> str:
    """The SDKs split a trailing ``ERR_NGROK_<n>`` line out of an error as its code."""
    return f"{msg}\nERR_NGROK_{code}"
