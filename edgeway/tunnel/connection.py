"""Who holds tunnels: ``Holder``, what the binder needs of any way in (an agent's session on
the tunnel listener, a connection to the SSH gateway), and ``AgentConnection``, what the
tunnel listener knows of one agent's session (its muxado connection, address, credential and
ACL, heartbeat clock, tunnels), shared by the listener and the binder."""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
from dataclasses import dataclass, field
from typing import Protocol

from edgeway.tunnel.muxado.aio import MuxConnection
from edgeway.tunnel.muxado.events import StreamError
from edgeway.tunnel.muxado.stream import StreamClosed
from edgeway.tunnel.registry import Opener, Tunnel
from edgeway.tunnel.rpc import StreamType


class Holder(Protocol):
    """A session that binds tunnels: its id (a ``tunnel_sessions`` row), credential, ACL,
    live tunnels, and the connection they travel on."""

    id: str
    credential: str
    acl: list[str]
    tunnels: dict[str, Tunnel]

    @property
    def conn(self) -> MuxConnection | Opener: ...

    async def stopping(self, tunnel_id: str, message: str, code: int) -> None:
        """Tell the client that the server ends one of its tunnels, and why."""


@dataclass
class AgentConnection:
    conn: MuxConnection
    peer: str
    id: str = ""
    last_beat: float = 0.0
    deadline: float = 10.0  # seconds without a heartbeat that end the session (Auth sets it)
    acl: list[str] = field(default_factory=list)
    credential: str = ""
    revoked: bool = False  # ended because its credential was deleted or deactivated
    client_cert: bool = False  # presented a client certificate (checked in the handshake)
    twins: bool = False  # one generated name for its https and http twin binds (ngrok 2)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    tunnels: dict[str, Tunnel] = field(default_factory=dict)

    async def stopping(self, tunnel_id: str, message: str, code: int) -> None:
        """StopTunnel on a stream of its own (no reply; the stream is closed, reset after a
        while if the agent never closes its half)."""
        with contextlib.suppress(StreamClosed, StreamError):
            stream = await self.conn.open_stream()
            try:
                await stream.write(struct.pack(">I", StreamType.STOP_TUNNEL) + json.dumps(
                    {"Id": tunnel_id, "Message": message,
                     "ErrorCode": f"ERR_NGROK_{code}"}).encode(), eof=True)
            finally:
                stream.close()
