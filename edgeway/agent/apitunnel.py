"""Tunnels that forward to the agent's own local API and web inspector (its ``web_addr``): the
spec's site-to-site flow publishes it as ``agent-api.<site>``, and whoever reaches that URL can
start tunnels to anything the agent's machine reaches. Such a tunnel starts only when it keeps
strangers out (``TunnelConfig.guarded``: basic_auth, oauth, oidc, ip_restriction, or a traffic
policy rule without expressions running basic-auth, oauth, oidc, jwt-validation or
restrict-ips) or says ``allow_unauthenticated: true``.

The same check runs wherever a tunnel comes from: a config file and the one-liners (when the
config loads: ``config check`` and ``start`` alike, against the configured ``web_addr``), the
local API's ``POST /api/tunnels`` and a config tunnel started after the API moved to another
port (both against the address the API listens on).
"""

from __future__ import annotations

import ipaddress
import socket

from edgeway.agent.tunnelconfig import Addr, TunnelConfig

OPTION = "allow_unauthenticated"


def _is_local(host: str) -> bool:
    """Whether ``host`` (an IP address) is one of this machine's (it can be bound)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.bind((host, 0))
    except OSError:
        return False
    return True


def reaches(addr: Addr, web_host: str, web_port: int) -> bool:
    """Whether a tunnel to ``addr`` reaches an API listening on ``web_host:web_port``."""
    if not web_port or addr.port != web_port:
        return False
    host, web = addr.host.lower().strip("[]"), web_host.lower().strip("[]")
    if host in ("localhost", web):
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False  # (another name: not resolved)
    if ip.is_loopback or ip.is_unspecified:
        return True
    try:
        listening = ipaddress.ip_address(web)
    except ValueError:
        return False
    return listening.is_unspecified and _is_local(host)


def refusal(config: TunnelConfig, web_host: str, web_port: int) -> str:
    """Why ``config`` may not start, or "" when it may."""
    if config.allow_unauthenticated or config.guarded() or \
            not reaches(config.addr, web_host, web_port):
        return ""
    web = f"[{web_host}]:{web_port}" if ":" in web_host else f"{web_host}:{web_port}"
    if not config.proto:
        how = ("a labeled tunnel's edge modules are not visible to the agent: when its edge "
               "logs visitors in, set")
    else:
        how = ("add basic_auth, oauth, oidc, ip_restriction or a traffic_policy rule without "
               "expressions that runs basic-auth, oauth, oidc, jwt-validation or restrict-ips; "
               "or, to publish it anyway, set")
    return (f"forwards to this agent's own API and web inspector (web_addr {web}) without "
            f"any login or address restriction, so anyone reaching its URL could start "
            f"tunnels to whatever this machine reaches: {how} {OPTION}: true on the tunnel "
            "(--allow-unauthenticated on a one-liner)")
