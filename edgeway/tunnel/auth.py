"""The Auth RPC, an agent's first on its session: the protocol version, the heartbeat it
asks for, its client certificate and its credential's token are checked, the session's limits
are raised from the pre-auth ones, and the welcome names the session."""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

from edgeway import __version__
from edgeway.tunnel import rpc
from edgeway.tunnel.admission import Admission, AuthFailed
from edgeway.tunnel.connection import AgentConnection
from edgeway.tunnel.muxado.stream import MuxStream

PROTOCOL_VERSIONS = ("3", "2")
# Until an agent authenticated, its session may open this many streams at once (Auth, the
# heartbeat; as many more refused end it) with frames this large, and must authenticate
# within AUTH_TIMEOUT seconds: a flood of junk or SYNs costs little. After that:
# AGENT_PEER_STREAMS (RPCs: binds, ...).
PRE_AUTH_STREAMS, PRE_AUTH_FRAME, AUTH_TIMEOUT = 4, 16 * 1024, 10.0
AGENT_PEER_STREAMS = 128


def pre_auth(session: AgentConnection) -> None:
    """The limits of a session that has not authenticated yet."""
    rules = session.conn.session
    rules.max_peer_streams, rules.max_frame = PRE_AUTH_STREAMS, PRE_AUTH_FRAME
    rules.max_refused = PRE_AUTH_STREAMS
    session.deadline = AUTH_TIMEOUT


def _nanoseconds(extra: dict[str, Any], key: str, default: int) -> float:
    """A duration the agent gives in nanoseconds (``HeartbeatInterval``), in seconds (at
    most a day)."""
    value = extra.get(key) or default
    if not isinstance(value, int | float) or isinstance(value, bool) \
            or not 0 <= value <= 86_400e9:
        raise AuthFailed(f"the Auth message's {key} must be a number of nanoseconds, at most "
                         "a day's")
    return value / 1e9


async def admit(admission: Admission, client_cas: str, session: AgentConnection,
                stream: MuxStream) -> tuple[str, dict[str, Any]] | None:
    """Read the Auth request and check it: its protocol version and Extra when the session
    may go on (its credential, ACL, heartbeat deadline and limits set), else None once the
    agent was told why and the connection closed."""
    req = rpc.folded(await rpc.read_message(stream))
    extra, versions = req.get("extra") or {}, req.get("version") or []
    version = next((v for v in versions if v in PROTOCOL_VERSIONS), "") \
        if isinstance(versions, list) else ""
    try:
        if not version:
            raise AuthFailed("no supported protocol version (this server speaks 3 and 2)")
        if not isinstance(extra, dict):
            raise AuthFailed("the Auth message's Extra must be a JSON object")
        interval = _nanoseconds(extra, "heartbeatinterval", 10_000_000_000)
        tolerance = _nanoseconds(extra, "heartbeattolerance", 15_000_000_000)
        await admission.address(session.peer)
        if client_cas and not session.client_cert:
            raise AuthFailed("this server requires an agent client certificate issued by "
                             "its agent certificate authority (--agent-client-cas); the "
                             "agent presented none (client_cert and client_key)")
        session.credential, session.acl = await admission.token(
            str(extra.get("authtoken") or ""))
    except AuthFailed as exc:
        await rpc.reply(stream, {"Version": version or "3", "ClientId": "",
                                 "Error": rpc.error_text(str(exc), exc.code)})
        await session.conn.close()
        return None
    session.deadline = max(1.0, interval + tolerance)
    session.last_beat = asyncio.get_running_loop().time()
    rules = session.conn.session
    rules.max_peer_streams, rules.max_frame, rules.max_refused = AGENT_PEER_STREAMS, None, None
    return version, extra


async def welcome(stream: MuxStream, version: str, session_id: str, region: str) -> None:
    await rpc.reply(stream, {"Version": version, "ClientId": session_id, "Extra": {
        "Version": __version__, "Region": region, "Cookie": secrets.token_urlsafe(16),
        "AccountName": "edgeway", "SessionDuration": 0, "PlanName": "", "Banner": ""}})
