"""Runtime kinds: tunnel sessions, tunnels and endpoints. Read-only through the API; the tunnel
server writes them as agents connect and bind."""

from __future__ import annotations

from typing import Any

from edgeway.catalog.model import Field, Kind, Ref

READ_ONLY = frozenset({"get", "list"})


def _out(name: str, typ: Any, doc: str, default: Any = None) -> Field:
    return Field(name, typ, doc, create="no", default=default)


TUNNEL_SESSIONS = Kind(
    collection="tunnel_sessions", prefix="ts", list_key="tunnel_sessions",
    title="TunnelSession", ops=READ_ONLY,
    describe="Connected agent sessions.",
    fields=(
        _out("agent_version", str, "version of the agent", ""),
        _out("credential", Ref | None, "the credential the agent authenticated with"),
        _out("ip", str, "address the agent connected from", ""),
        _out("metadata", str, "metadata the agent reported", ""),
        _out("os", str, "operating system the agent reported", ""),
        _out("region", str, "region the agent connected to", ""),
        _out("started_at", str, "when the session started, RFC 3339", ""),
        _out("transport", str, "'ngrok/v2' for agents, 'ssh' for the SSH gateway", ""),
    ),
)

TUNNELS = Kind(
    collection="tunnels", prefix="tn", list_key="tunnels", title="Tunnel", ops=READ_ONLY,
    describe="Tunnels bound by connected agents.",
    fields=(
        _out("public_url", str, "URL the tunnel is reachable at", ""),
        _out("started_at", str, "when the tunnel was bound, RFC 3339", ""),
        _out("metadata", str, "metadata the agent set on the tunnel", ""),
        _out("proto", str, "http, https, tcp or tls", ""),
        _out("region", str, "region of the tunnel", ""),
        _out("tunnel_session", Ref | None, "the session that bound the tunnel"),
        _out("endpoint", Ref | None, "the endpoint the tunnel serves"),
        _out("labels", dict[str, str], "labels of a labeled tunnel", dict),
        _out("backends", list[Ref], "backends the tunnel is part of", list),
        _out("forwards_to", str, "what the agent forwards to", ""),
    ),
)

ENDPOINTS = Kind(
    collection="endpoints", prefix="ep", list_key="endpoints", title="Endpoint", ops=READ_ONLY,
    describe="Public endpoints served by tunnels and edges.",
    fields=(
        _out("region", str, "region of the endpoint", ""),
        _out("updated_at", str, "last change, RFC 3339", ""),
        _out("public_url", str, "deprecated: use url", ""),
        _out("proto", str, "http, https, tcp or tls", ""),
        _out("scheme", str, "URL scheme", ""),
        _out("hostport", str, "host:port", ""),
        _out("host", str, "host name", ""),
        _out("port", int, "port", 0),
        _out("type", str, "ephemeral, edge or cloud", ""),
        _out("metadata", str, "metadata", ""),
        _out("description", str, "description", ""),
        _out("domain", Ref | None, "reserved domain served"),
        _out("tcp_addr", Ref | None, "reserved address served"),
        _out("tunnel", Ref | None, "tunnel behind the endpoint"),
        _out("edge", Ref | None, "edge behind the endpoint"),
        _out("upstream_url", str, "where traffic is forwarded", ""),
        _out("upstream_protocol", str, "protocol towards the upstream", ""),
        _out("url", str, "the endpoint URL", ""),
        _out("principal", Ref | None, "identity that created the endpoint"),
        _out("traffic_policy", str, "traffic policy document", ""),
        _out("bindings", list[str], "bindings", list),
        _out("tunnel_session", Ref | None, "session of the tunnel"),
        _out("name", str, "name", ""),
        _out("pooling_enabled", bool, "whether the URL is shared by several agents", False),
    ),
)

KINDS = (TUNNEL_SESSIONS, TUNNELS, ENDPOINTS)
