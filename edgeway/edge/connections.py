"""Where a TCP or TLS connection goes, decided before its first byte is read: the hooks of
what it reached (an edge's, a cloud endpoint's or a tunnel's plan: IP restrictions, the
traffic policy's ``on_tcp_connect``) refuse it, let it go on to their own target, or send it
to an internal TCP endpoint (``forward-internal``), whose own hooks then decide the same way,
at most ``MAX_HOPS`` times."""

from __future__ import annotations

from typing import Any

import structlog

from edgeway.edge.hooks import UNKNOWN, Diverted, Local
from edgeway.edge.modules.forward_internal import MAX_HOPS
from edgeway.edge.pipeline import Plan
from edgeway.edge.router import EdgeRouter
from edgeway.tunnel.registry import Tunnel

log = structlog.get_logger()


def decide(router: EdgeRouter, plan: Plan, ip: str, port: int,
           local: Local = UNKNOWN) -> bool | Tunnel:
    """A connection from ``ip``:``port`` through ``plan``'s hooks: refused (False), on to the
    plan's own target (True), or the tunnel of the internal TCP endpoint a traffic policy's
    forward-internal sends it to, once that endpoint's own hooks admitted it."""
    inner = router.registry.internal_tcp
    verdict = plan.connect(ip, port, inner, local)
    target: Tunnel | None = None
    hops = 0
    while isinstance(verdict, Diverted):
        if hops == MAX_HOPS:
            log.info("tcp_forward_loop", addr=verdict.addr, hops=hops)
            return False
        hops += 1
        target = verdict.target if isinstance(verdict.target, Tunnel) else None
        if target is None:  # (nobody serves it, and the action halts)
            log.info("tcp_forward_offline", addr=verdict.addr)
            return False
        verdict = router.bind_plan(target).connect(ip, port, inner, local)
    return (target or True) if verdict is True else False


def to_tunnel(router: EdgeRouter, tunnel: Tunnel, ip: str, port: int,
              sockname: Any = None) -> Tunnel | None:
    """The tunnel a connection to an agent's TCP or TLS endpoint (accepted on
    ``sockname``) goes to (its own, or the internal endpoint's its traffic policy forwards
    to), None when refused; none for a banned address."""
    if tunnel.url.removeprefix("tcp://") in router.snapshot.banned:
        return None
    verdict = decide(router, router.bind_plan(tunnel), ip, port, router.local(sockname))
    return tunnel if verdict is True else verdict or None
