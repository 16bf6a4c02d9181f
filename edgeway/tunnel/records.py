"""What the tunnel listener records in the store while an agent is connected: its session,
each tunnel, and each tunnel's endpoint, as the API renders them (references through the
catalog's ``ref``). Rows carry the ``node`` that wrote them: only it cleans them up."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from edgeway.catalog.checks import internal
from edgeway.catalog.model import ref
from edgeway.settings import Settings
from edgeway.tunnel.registry import Tunnel

DEFAULT_PORTS = {"http": 80, "https": 443, "tls": 443}


def now_text() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def session_doc(settings: Settings, node: str, peer: str, credential: str,
                extra: dict[str, Any], transport: str = "ngrok/v2") -> dict[str, Any]:
    """A ``tunnel_sessions`` row for an agent at ``peer`` (``extra``: its Auth's Extra)."""
    return {"agent_version": str(extra.get("version") or ""),
            "credential": ref(settings.public_url, credential), "ip": peer,
            "metadata": str(extra.get("metadata") or ""), "os": str(extra.get("os") or ""),
            "region": settings.region, "started_at": now_text(), "transport": transport,
            "created_at": now_text(), "node": node}


def endpoint_doc(settings: Settings, node: str, session_id: str, tunnel: Tunnel,
                 domain_id: str) -> dict[str, Any]:
    """The ``endpoints`` row of a tunnel with a public URL."""
    base, req = settings.public_url, tunnel.req
    scheme, _, hostport = tunnel.url.partition("://")
    host, _, port = hostport.rpartition(":") if ":" in hostport else (hostport, "", "")
    default = DEFAULT_PORTS.get(scheme, 0)
    return {"region": settings.region, "updated_at": now_text(), "created_at": now_text(),
            "public_url": tunnel.url, "url": tunnel.url, "proto": req.proto, "scheme": scheme,
            "host": host, "port": int(port) if port else default,
            "hostport": f"{host}:{port or default}", "type": "ephemeral",
            "metadata": req.metadata, "description": "",
            "domain": ref(base, domain_id or None), "tcp_addr": None,
            "tunnel": ref(base, tunnel.id), "edge": None, "upstream_url": req.forwards_to,
            "upstream_protocol": "", "principal": None, "traffic_policy": "",
            "bindings": ["internal" if internal(host) else "public"],
            "tunnel_session": ref(base, session_id), "name": "",
            "pooling_enabled": req.pooled, "node": node}


def tunnel_doc(settings: Settings, node: str, session_id: str, tunnel: Tunnel,
               endpoint_id: str, bind: str) -> dict[str, Any]:
    """The ``tunnels`` row of a bound tunnel (``endpoint_id``: "" when it has none). Besides
    what the API shows, it keeps what another node needs to serve the tunnel: its host name
    or port, its bind request (``bind``, sealed: see ``bindcodec``) and whether its holder
    wants to be told of each HTTP request it serves (``observed``: an SSH gateway's tunnel,
    whose client sees a line per request)."""
    req = tunnel.req
    return {"public_url": tunnel.url, "started_at": now_text(), "created_at": now_text(),
            "metadata": req.metadata, "proto": req.proto, "region": settings.region,
            "tunnel_session": ref(settings.public_url, session_id),
            "endpoint": ref(settings.public_url, endpoint_id or None), "labels": req.labels,
            "backends": [], "forwards_to": req.forwards_to, "node": node,
            "host": tunnel.host, "port": tunnel.port, "bind": bind,
            "observed": tunnel.observer is not None}
