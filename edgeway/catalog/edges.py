"""Edges (TCP, TLS, HTTPS) and the routes of HTTPS edges, with the modules each may carry.

Hostports are ``host:port``; each is claimed platform-wide, so two edges never serve the same
one. TLS and HTTPS edge hosts must be reserved domains (or covered by a reserved wildcard
domain); the edge then refers to that domain, which cannot be deleted while in use.
"""

from __future__ import annotations

from typing import Any, Literal

from edgeway.catalog import checks
from edgeway.catalog.model import Child, Context, Derive, Field, Kind, Link
from edgeway.catalog.modules import field as module
from edgeway.catalog.modules import saml, sealed
from edgeway.catalog.shapes import response_of
from edgeway.errors import Invalid

DOMAIN_LINK = Link(("reserved_domains",), "restrict", code=7117)
ADDR_LINK = Link(("reserved_addrs",), "restrict", code=7105)
AUTH_MODULES = ("oauth", "oidc", "saml")


def hostport(member: str, value: str) -> str:
    host, sep, port = value.strip().lower().rpartition(":")
    if not sep or not host or not (port.isascii() and port.isdigit()) \
            or not 1 <= int(port) <= 65535:
        raise Invalid(member, f"'{value}' must be host:port with a port from 1 to 65535", 7104)
    return f"{checks.host(member, host)}:{int(port)}"


def _hostports(value: list[str], _ctx: Context) -> list[str]:
    out = [hostport(f"hostports[{i}]", v) for i, v in enumerate(value)]
    for i, hp in enumerate(out):
        if hp in out[:i]:
            raise Invalid(f"hostports[{i}]", f"'{hp}' is listed twice", 215)
    return out


def _tcp_hostports(value: list[str], ctx: Context) -> list[str]:
    """A TCP edge listens on its hostports' ports: none this server already uses, nor one of
    the agents' TCP range but a reserved address's (``api.hostports`` checks it is one), nor
    one it may not bind."""
    out = _hostports(value, ctx)
    settings = ctx.settings
    own = dict(settings.own_ports)
    for i, hp in enumerate(out):
        port = int(hp.rsplit(":", 1)[1])
        if port in own:
            why = f"port {port} is this server's {own[port]}"
        elif in_agent_range(port, ctx) \
                and hp.rsplit(":", 1)[0].strip("[]") != settings.tcp_host.lower():
            low, high = settings.agent_ports or (0, 0)
            why = (f"port {port} is in the range of agent TCP tunnels ({low}-{high}), "
                   f"where an edge serves reserved addresses only ({settings.tcp_host}:PORT)")
        elif port < settings.lowest_port:
            why = (f"port {port} is privileged: this server may only listen on ports from "
                   f"{settings.lowest_port} (run it with CAP_NET_BIND_SERVICE for lower ones)")
        else:
            continue
        raise Invalid(f"hostports[{i}]", f"'{hp}' cannot be served: {why}", 7105)
    return out


def in_agent_range(port: int, ctx: Context) -> bool:
    ports = ctx.settings.agent_ports
    return ports is not None and ports[0] <= port <= ports[1]


def _hostports_field(domains: bool) -> Field:
    doc = "host:port pairs the edge serves" + (
        "; hosts must be reserved domains" if domains else
        "; a reserved address, or a port of no listener of this server outside the agent "
        "TCP range that it may bind")
    return Field("hostports", list[str], doc, update=True, default=list,
                 check=_hostports if domains else _tcp_hostports,
                 claim="hostport", link=DOMAIN_LINK if domains else ADDR_LINK,
                 refs=lambda _v: [])


def _standard(route: bool = False) -> tuple[Field, ...]:
    return (
        Field("description", str, "human-readable description, at most 255 bytes",
              update=True, default="", max_bytes=255, empty_is_unset=route),
        Field("metadata", str, "arbitrary machine-readable data, at most 4096 bytes",
              update=True, default="", max_bytes=4096, empty_is_unset=route),
        Field("policy", None, "a legacy member the reference API still renders: always null",
              create="no"),
    )


def _match(value: str, _ctx: Context) -> str:
    if value.startswith("/"):
        host, path = "", value
    else:
        host, slash, rest = value.partition("/")
        path = slash + rest
        checks.domain_name("match", host, wildcard=True, code=7131)
    if any(c in path for c in " ?#\t\r\n") or "//" in path:
        raise Invalid("match", f"'{value}' must be a path such as /blog, a host, or "
                      "host/path, without query, fragment or spaces", 7131)
    return (host.lower() + path) if host else path


def _route_check(doc: dict[str, Any], _ctx: Context) -> None:
    auth = [m for m in AUTH_MODULES if doc.get(m)]
    if len(auth) > 1:
        raise Invalid(auth[1], f"only one of {', '.join(AUTH_MODULES)} may be set on a route "
                      f"(it has {', '.join(auth)})", 7079)


def _route_derive(doc: dict[str, Any], ctx: Context,
                  old: dict[str, Any] | None) -> dict[str, Any]:
    subject = f"{ctx.settings.public_url}/saml"
    return {"saml": saml.carry(doc.get("saml"), (old or {}).get("saml"), ctx, subject),
            **sealed(doc, ctx, old, ROUTE_MODULES)}


def _sealing(names: tuple[str, ...]) -> Derive:
    """The derive of an edge kind: its modules' secrets sealed."""
    return lambda doc, ctx, old: sealed(doc, ctx, old, names)


ROUTE_MODULES = ("backend", "ip_restriction", "circuit_breaker", "compression",
                 "request_headers", "response_headers", "webhook_verification", "oauth",
                 "saml", "oidc", "websocket_tcp_converter", "user_agent_filter",
                 "traffic_policy")
MatchType = Literal["exact_path", "path_prefix"]

ROUTES = Kind(
    collection="edges/https/routes", prefix="edghtsrt", list_key="routes",
    title="HTTPSEdgeRoute", path="/edges/https/{edge_id}/routes",
    ops=frozenset({"create", "get", "update", "delete"}), not_found_code=7124,
    describe="Routes of an HTTPS edge: requests matching a path (and host) get their modules.",
    unique=(("edge_id", "match_type", "match"),), unique_code=7126,
    unique_msg="edge '{edge_id}' already has a {match_type} route for '{match}'",
    fields=(
        Field("edge_id", str, "the HTTPS edge the route belongs to", create="no",
              link=Link(("edges/https",), "cascade", code=7000)),
        Field("match_type", MatchType, "exact_path or path_prefix", create="required",
              update=True, empty_is_unset=True,
              update_type=Literal["exact_path", "path_prefix", ""], code=7130),
        Field("match", str, "/path, host or host/path", create="required", update=True,
              empty_is_unset=True, check=_match),
        *_standard(route=True),
        *(module(m, "route") for m in ROUTE_MODULES),
    ),
    check=_route_check, derive=_route_derive,
)

HTTPS_EDGE_MODULES = ("mutual_tls", "tls_termination")
HTTPS_EDGES = Kind(
    collection="edges/https", prefix="edghts", list_key="https_edges", title="HTTPSEdge",
    not_found_code=7000, describe="HTTPS edges: hostports, TLS settings and routes.",
    children=(Child("routes", ROUTES.collection, "edge_id"),),
    derive=_sealing(HTTPS_EDGE_MODULES),
    fields=(
        *_standard(), _hostports_field(domains=True),
        *(module(m, "https_edge") for m in HTTPS_EDGE_MODULES),
        Field("routes", list[response_of(ROUTES)], "the edge's routes",  # type: ignore
              create="no", default=list),
    ),
)


def _tls_check(doc: dict[str, Any], _ctx: Context) -> None:
    """Client certificates are checked in the edge's handshake: only when it terminates TLS."""
    term = doc.get("tls_termination") or {}
    mtls = doc.get("mutual_tls") or {}
    if mtls and mtls.get("enabled", True) is not False and term.get("terminate_at") != "edge":
        why = ("tls_termination.terminate_at is 'upstream'" if term else
               "the edge has no tls_termination and passes TLS through")
        raise Invalid("mutual_tls", f"needs TLS terminated at the edge ({why}): the edge "
                      "checks client certificates in its own handshake; set "
                      "tls_termination.terminate_at to 'edge' first", 215)


TCP_EDGE_MODULES = ("backend", "ip_restriction", "traffic_policy")
TCP_EDGES = Kind(
    collection="edges/tcp", prefix="edgtcp", list_key="tcp_edges", title="TCPEdge",
    not_found_code=7000, describe="TCP edges: raw TCP hostports forwarded to a backend.",
    fields=(*_standard(), _hostports_field(domains=False),
            *(module(m, "tcp_edge") for m in TCP_EDGE_MODULES)),
    derive=_sealing(TCP_EDGE_MODULES),
)

TLS_EDGE_MODULES = ("backend", "ip_restriction", "mutual_tls", "tls_termination",
                    "traffic_policy")
TLS_EDGES = Kind(
    collection="edges/tls", prefix="edgtls", list_key="tls_edges", title="TLSEdge",
    not_found_code=7000, describe="TLS edges: routed by SNI, terminated or passed through.",
    fields=(*_standard(), _hostports_field(domains=True),
            *(module(m, "tls_edge") for m in TLS_EDGE_MODULES)),
    check=_tls_check, derive=_sealing(TLS_EDGE_MODULES),
)

KINDS = (HTTPS_EDGES, ROUTES, TCP_EDGES, TLS_EDGES)
# the modules each kind carries (their secrets are sealed: store.sealing, edge.router)
MODULES_OF = {HTTPS_EDGES.collection: HTTPS_EDGE_MODULES, ROUTES.collection: ROUTE_MODULES,
              TCP_EDGES.collection: TCP_EDGE_MODULES, TLS_EDGES.collection: TLS_EDGE_MODULES}
