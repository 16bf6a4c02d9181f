"""Commands the server sends an agent on a stream it opens (Stop, Restart, Update, as the API's
tunnel session operations ask), and the agent's answer."""

from __future__ import annotations

import asyncio
import json
import struct
from typing import Any

from edgeway.tunnel import rpc
from edgeway.tunnel.connection import AgentConnection
from edgeway.tunnel.muxado.events import StreamError
from edgeway.tunnel.muxado.stream import MuxStream, StreamClosed
from edgeway.tunnel.rpc import StreamType


async def send(session: AgentConnection, kind: int, body: dict[str, Any],
               timeout: float = 10.0) -> str:
    """The agent's error text ("" when it accepted). The stream is closed after (an agent
    that never closes its half gets it reset after a while): commands do not use up the
    streams the session may hold."""
    stream: MuxStream | None = None
    try:
        async with asyncio.timeout(timeout):  # (opening waits while the session is full)
            stream = await session.conn.open_stream()
            await stream.write(struct.pack(">I", kind) + json.dumps(body).encode())
            answer = rpc.folded(await rpc.read_message(stream))
    except (StreamClosed, StreamError, rpc.RPCError, asyncio.IncompleteReadError):
        if kind == StreamType.STOP and await _ends(session):
            return ""  # it stopped before its answer went out: what was asked happened
        return "the agent closed the command stream without answering"
    except TimeoutError:
        return f"the agent did not answer within {timeout:g} s"
    finally:
        if stream is not None:
            stream.close()
    return str(answer.get("error") or "")


async def _ends(session: AgentConnection, within: float = 2.0) -> bool:
    """Whether the session's connection is gone, or goes within ``within`` seconds."""
    try:
        await asyncio.wait_for(session.conn.closed.wait(), within)
    except TimeoutError:
        return False
    return True
