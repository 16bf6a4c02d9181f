"""The traffic policy's ``forward-internal`` action: the request goes to an internal endpoint
(an agent's tunnel bound to a ``.internal`` name, which no public listener serves) instead of
the route's target. ``url`` names it (``https://api.internal``; the scheme picks the
endpoint's tunnel of that scheme when it has one), ``binding`` is ``internal`` (the only
kind), ``on_error`` is ``halt`` (default: 502 ``ERR_EDGEWAY_4019`` when no agent serves it)
or ``continue`` (the policy's next actions run as if it were not there). It ends the
policy's request phase; the route's later modules still run, then the internal endpoint's
own modules and policy (its ``check`` and request hooks), and its response comes back through
both. A request forwarded more than ``MAX_HOPS`` times is a loop: 508 ``ERR_EDGEWAY_4020``.

On a TCP or TLS connection (``on_tcp_connect``) the URL is an internal TCP endpoint's
(``tcp://db.internal:5432``, an agent's TCP bind of that address): the connection's bytes go
to it (``TcpForward``; the router follows it, that endpoint's own on_tcp_connect included,
at most ``MAX_HOPS`` times). With nobody serving it, ``halt`` closes the connection and
``continue`` runs the policy on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from edgeway.edge.hooks import Exchange, Hook, Verdict
from edgeway.edge.modules.policy_values import Scope, Unsupported
from edgeway.edge.pages import page

MAX_HOPS = 5


@dataclass(frozen=True)
class Forward(Hook):
    name = "forward-internal"
    scheme: str
    host: str
    halt: bool

    async def request(self, x: Exchange) -> Verdict:
        tunnel = x.services.internal(self.host, self.scheme)
        if tunnel is None:
            if self.halt:
                return page(502, "Endpoint offline", f"No agent serves the internal endpoint "
                            f"{self.scheme}://{self.host} right now.", 4019)
            return None
        if x.hops >= MAX_HOPS:
            return page(508, "Loop detected", f"The request was forwarded {x.hops} times "
                        "between internal endpoints: their traffic policies forward in a "
                        "loop.", 4020)
        x.forward = tunnel
        x.hops += 1
        return None


@dataclass(frozen=True)
class TcpForward:
    """forward-internal in on_tcp_connect (``Policy.on_tcp_connect`` stops at it)."""
    addr: str  # db.internal:5432
    halt: bool


def _options(cfg: dict[str, Any]) -> bool:
    """Whether the action halts (its ``binding`` and ``on_error`` checked)."""
    binding = cfg.get("binding", "internal")
    if binding != "internal":
        raise Unsupported(f"binding {binding!r} (internal endpoints only)")
    on_error = cfg.get("on_error", "halt")
    if on_error not in ("halt", "continue"):
        raise Unsupported(f"on_error {on_error!r} (halt or continue)")
    return bool(on_error == "halt")


def compile_tcp(cfg: dict[str, Any], at: Scope) -> TcpForward:
    """The action on TCP and TLS connections; ``Unsupported`` naming what it cannot
    honour."""
    if at.endpoint:
        raise Unsupported("on an HTTP endpoint's connections: forward its requests with "
                          "forward-internal in on_http_request")
    url = str(cfg.get("url") or "")
    parts = urlsplit(url)
    host = (parts.hostname or "").rstrip(".")
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "tcp" or not host.endswith(".internal") or host == "internal" \
            or not port or parts.path not in ("", "/") or parts.query:
        raise Unsupported(f"url {url!r}: on a connection, an internal TCP endpoint's URL: "
                          "tcp://, a name ending in .internal and a port "
                          "(tcp://db.internal:5432)")
    return TcpForward(f"{host.lower()}:{port}", _options(cfg))


def compile(cfg: dict[str, Any]) -> Forward:
    """The action; ``Unsupported`` naming what it cannot honour."""
    url = str(cfg.get("url") or "")
    parts = urlsplit(url)
    host = (parts.hostname or "").rstrip(".")
    if parts.scheme not in ("http", "https") or not host.endswith(".internal") \
            or host == "internal":
        raise Unsupported(f"url {url!r}: an internal endpoint's URL, http:// or https:// and "
                          "a name ending in .internal (https://api.internal)")
    if parts.port is not None or parts.path not in ("", "/") or parts.query:
        raise Unsupported(f"url {url!r}: the endpoint's scheme and name only (no port or path)")
    return Forward(parts.scheme, host, _options(cfg))
