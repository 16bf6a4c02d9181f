"""The agent's heartbeats on a session: a HEARTBEAT stream, four random bytes every
``heartbeat_interval``, each echoed by the server; no echo within ``heartbeat_tolerance``
ends the session (the agent then redials)."""

from __future__ import annotations

import asyncio
import secrets
import struct
import time
from collections.abc import Callable

import structlog

from edgeway.agent.config import AgentConfig
from edgeway.tunnel.muxado.aio import MuxConnection
from edgeway.tunnel.muxado.events import StreamError
from edgeway.tunnel.muxado.stream import StreamClosed
from edgeway.tunnel.rpc import StreamType

log = structlog.get_logger()


async def beat(conn: MuxConnection, config: AgentConfig,
               measured: Callable[[float], None]) -> None:
    """Beat at once, then every interval; ``measured`` hears each round trip (seconds).
    The round trip is timed with ``time.perf_counter``: uvloop's ``loop.time()`` is the
    loop pass's start in whole milliseconds, so a loopback or LAN round trip read 0."""
    try:
        stream = await conn.open_stream()
        await stream.write(struct.pack(">I", StreamType.HEARTBEAT))
    except (StreamClosed, StreamError):
        return  # the session is ending
    while True:
        nonce = secrets.token_bytes(4)
        sent = time.perf_counter()
        try:
            await stream.write(nonce)
            echo = await asyncio.wait_for(stream.readexactly(4), config.heartbeat_tolerance)
        except (TimeoutError, asyncio.IncompleteReadError, StreamClosed):
            if not conn.closed.is_set():
                log.warning("heartbeat_missed")
            await conn.close()
            return
        if echo == nonce:
            measured(time.perf_counter() - sent)
        await asyncio.sleep(config.heartbeat_interval)
