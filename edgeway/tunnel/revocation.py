"""Agent sessions that may no longer be held: a credential (or its bot or service user)
deleted or deactivated, an agent IP restriction that now refuses the session's address, or an
ACL that changed. Checked when the API writes those (on this node) and every
``RECHECK_EVERY`` seconds (changes made through other nodes)."""

from __future__ import annotations

import structlog

from edgeway.tunnel.admission import Admission, AuthFailed
from edgeway.tunnel.binder import Binder
from edgeway.tunnel.connection import AgentConnection

log = structlog.get_logger()


async def recheck(admission: Admission, binder: Binder, live: list[AgentConnection]) -> None:
    """End the ``live`` sessions that may no longer be held; apply a changed ACL to the
    others."""
    by_credential: dict[str, list[AgentConnection]] = {}
    for session in live:
        try:
            await admission.address(session.peer)
        except AuthFailed as exc:
            await revoke(binder, session, str(exc))
            continue
        by_credential.setdefault(session.credential, []).append(session)
    for credential, sessions in by_credential.items():
        try:
            acl = await admission.still_valid(credential)
        except AuthFailed as exc:
            for session in sessions:
                await revoke(binder, session, str(exc))
            continue
        for session in sessions:
            if session.acl != acl:
                await binder.reauthorize(session, acl)


async def revoke(binder: Binder, session: AgentConnection, reason: str) -> None:
    """End a session that may no longer be held: its tunnels first (their ports and names
    are free, and refuse traffic, by the time the agent sees the end), then its
    connection."""
    log.info("agent_session_revoked", session=session.id, reason=reason)
    session.revoked = True
    for tunnel_id in list(session.tunnels):
        await binder.drop(session, tunnel_id, clean=True)
    await session.conn.close()
