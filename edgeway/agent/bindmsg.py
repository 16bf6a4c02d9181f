"""The Bind (or StartTunnelWithLabel) message for one tunnel, as the ngrok SDKs send it: the
protocol, the public name or address asked for, and the edge middleware in ``Opts`` (PascalCase
members, snake_case inside). The Host header option is not sent: the agent applies it itself
(``edgeway.agent.inspect``)."""

from __future__ import annotations

from typing import Any

from edgeway.agent.tunnelconfig import TunnelConfig
from edgeway.tunnel.rpc import StreamType


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
