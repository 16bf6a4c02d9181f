"""``AgentConnection``: what the tunnel listener knows of one agent's session (its muxado
connection, address, credential and ACL, heartbeat clock, tunnels), shared by the listener and
the binder."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from edgeway.tunnel.muxado.aio import MuxConnection
from edgeway.tunnel.registry import Tunnel


@dataclass
class AgentConnection:
    conn: MuxConnection
    peer: str
    id: str = ""
    last_beat: float = 0.0
    deadline: float = 10.0  # seconds without a heartbeat that end the session
    acl: list[str] = field(default_factory=list)
    credential: str = ""
    revoked: bool = False  # ended because its credential was deleted or deactivated
    client_cert: bool = False  # presented a client certificate (checked in the handshake)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    tunnels: dict[str, Tunnel] = field(default_factory=dict)
