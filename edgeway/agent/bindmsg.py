"""The Auth message of a session, and the Bind (or StartTunnelWithLabel) message for one
tunnel, as the ngrok SDKs send them. A bind names the protocol, the public name or address
asked for, and the edge middleware in ``Opts`` (PascalCase members, snake_case inside). The
Host header option is not sent: the agent applies it itself (``edgeway.agent.inspect``)."""

from __future__ import annotations

import platform
from typing import Any

from edgeway import __version__
from edgeway.agent.config import AgentConfig
from edgeway.agent.tunnelconfig import TunnelConfig
from edgeway.tunnel.rpc import StreamType


def auth_message(c: AgentConfig, session_id: str, cookie: str) -> dict[str, Any]:
    """Auth: the authtoken, the heartbeat settings, and what this agent is."""
    return {
        "Version": ["3", "2"], "ClientId": session_id, "Extra": {
            "OS": platform.system().lower(), "Arch": platform.machine(),
            "Authtoken": c.authtoken, "Version": __version__, "Hostname": "",
            "UserAgent": f"edgeway-agent/{__version__}", "Metadata": c.metadata,
            "Cookie": cookie, "HeartbeatInterval": int(c.heartbeat_interval * 1e9),
            "HeartbeatTolerance": int(c.heartbeat_tolerance * 1e9),
            "ClientType": "edgeway-agent", "StopUnsupportedError": "",
            "RestartUnsupportedError": "",
            "UpdateUnsupportedError": "the Edgeway agent is updated with its package"}}


def bind_message(config: TunnelConfig, tunnel_id: str) -> tuple[int, dict[str, Any]]:
    c = config
    if c.labels:
        return StreamType.START_TUNNEL_WITH_LABEL, {
            "Labels": c.labels, "ForwardsTo": c.addr.url(), "ForwardsProto": "",
            "Metadata": c.metadata}
    opts: dict[str, Any]
    if c.proto == "tcp":
        proto, opts = "tcp", {"Addr": c.remote_addr}
    else:
        opts = {"Domain": c.domain, "Subdomain": c.subdomain, "Hostname": ""}
        proto = "tls" if c.proto == "tls" else (
            "http" if tuple(c.schemes) == ("http",) else "https")
        if c.basic_auth:
            opts["BasicAuth"] = {"Credentials": [
                {"Username": u, "CleartextPassword": p} for u, p in c.basic_auth]}
    if c.traffic_policy:
        opts["TrafficPolicy"] = c.traffic_policy
    opts.update(c.middleware)
    return StreamType.BIND, {"Id": tunnel_id, "Proto": proto, "ForwardsTo": c.addr.url(),
                             "ForwardsProto": "", "Opts": opts,
                             "Extra": {"Token": "", "Metadata": c.metadata}}
