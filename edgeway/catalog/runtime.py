"""Runtime kinds: tunnel sessions, tunnels and endpoints. Read-only through the API; the tunnel
server writes them as agents connect and bind."""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import urlsplit

from edgeway.catalog import checks
from edgeway.catalog.checks import internal
from edgeway.catalog.model import Context, Field, Kind, Link, Ref
from edgeway.catalog.modules import On
from edgeway.catalog.modules.policy import check_policy, modern, parse
from edgeway.errors import Invalid

READ_ONLY = frozenset({"get", "list"})
# what a write of a cloud endpoint is announced as besides "endpoints" (which every agent's
# bind announces too): the edge reloads its routing for it
CLOUD_CHANGED = "cloud_endpoints"


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

def _url(value: str, ctx: Context) -> str:
    """A cloud endpoint's URL: ``https://`` or ``http://`` and a host name, nothing else (an
    internal one: one name ending in ``.internal``); ``tls://`` and a host name (not an
    internal one); or ``tcp://`` and a reserved address's host and port."""
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https", "tls", "tcp"):
        raise Invalid("url", f"'{value}' must be an http://, https://, tls:// or tcp:// URL",
                      215)
    try:
        port = parts.port
    except ValueError:
        raise Invalid("url", f"'{value}': its port is not a number from 1 to 65535",
                      215) from None
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username \
            or (port is not None) != (parts.scheme == "tcp"):
        raise Invalid("url", f"'{value}' must be a scheme and a host name only (no port, path, "
                      "query or user); a tcp:// one a reserved address, host and port "
                      "(tcp://1.tcp.example.com:20001)", 215)
    if parts.scheme == "tcp":
        host = checks.host("url", parts.hostname or "")
        if internal(host):
            raise Invalid("url", f"'{value}': internal TCP endpoints are agents' binds here "
                          "(tcp://db.internal:5432), not cloud endpoints", 215)
        return f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"
    host = checks.domain_name("url", parts.hostname or "")  # (no wildcard)
    if parts.scheme == "tls" and internal(host):
        raise Invalid("url", f"'{value}': internal TLS endpoints are not served here; an "
                      "internal TCP endpoint (an agent's tcp://NAME.internal:PORT) takes "
                      "the bytes a policy forwards", 215)
    return f"{parts.scheme}://{host}"


def _policy(value: str, _ctx: Context) -> str:
    if not value.strip():
        raise Invalid("traffic_policy", "is required: the policy document, JSON or YAML (a "
                      "cloud endpoint does only what its policy says)", 215)
    parse("traffic_policy", value)  # (its phases are checked with the URL: ``_check``)
    return value


def _check(doc: dict[str, Any], _ctx: Context) -> None:
    if doc.get("type", "cloud") != "cloud":
        raise Invalid("type", "only cloud endpoints are created through the API; agent "
                      "endpoints come from agents' binds", 215)
    url = str(doc.get("url", ""))
    on: On = "tcp_edge" if url.startswith("tcp://") else "tls_edge" \
        if url.startswith("tls://") else "http_endpoint"
    if "traffic_policy" in doc:
        text = modern("traffic_policy", str(doc["traffic_policy"]), on)
        check_policy("traffic_policy", text, on)
    want = ["internal"] if internal(urlsplit(url).hostname or "") else ["public"]
    if list(doc.get("bindings") or ["public"]) != want:
        raise Invalid("bindings", f"must be {want} for {url}: an internal endpoint's URL ends "
                      "in .internal and is reached only through forward-internal; any other "
                      "is public", 215)


def _derive(doc: dict[str, Any], ctx: Context, old: dict[str, Any] | None) -> dict[str, Any]:
    """The members a cloud endpoint's URL gives; `updated_at` moves only when a member
    does (an empty update changes nothing)."""
    scheme, _, host = str(doc["url"]).partition("://")
    if scheme == "tcp":
        hostport = host
        host, port = host.rpartition(":")[0].strip("[]"), int(host.rpartition(":")[2])
    else:
        port = 80 if scheme == "http" else 443  # (nominal, as edges' hostports: one claim)
        hostport = f"{host}:{port}"
    out: dict[str, Any] = {
        "scheme": scheme, "proto": scheme, "host": host, "port": port,
        "hostport": hostport, "public_url": doc["url"], "type": "cloud",
        "region": ctx.settings.region}
    same = old is not None and all(doc.get(k) == old.get(k) for k in doc.keys() | old.keys()
                                   if k != "updated_at" and k not in out)
    out["updated_at"] = (old or {}).get("updated_at", "") if same else \
        ctx.now.strftime("%Y-%m-%dT%H:%M:%SZ")
    return out


def _fixed(doc: dict[str, Any]) -> str:
    """Why an endpoint the API did not create may not be changed or deleted."""
    if doc.get("type", "cloud") == "cloud":
        return ""
    edge = bool(doc.get("edge"))
    return (f"Endpoint '{doc.get('id')}' is {'an edge' if edge else 'an agent'}'s: it comes "
            f"and goes with {'the edge' if edge else 'its tunnel'}; only cloud endpoints are "
            "changed or deleted through the API.")


ENDPOINTS = Kind(
    collection="endpoints", prefix="ep", list_key="endpoints", title="Endpoint",
    describe="Endpoints: those agents' tunnels and edges serve (read-only: they come and go "
             "with them), and cloud endpoints, created here, that serve a URL with no agent: "
             "their traffic policy answers, redirects or forwards to an internal endpoint.",
    check=_check, derive=_derive, fixed=_fixed,
    fields=(
        _out("region", str, "region of the endpoint", ""),
        _out("updated_at", str, "last change, RFC 3339", ""),
        _out("public_url", str, "deprecated: use url", ""),
        _out("proto", str, "http, https, tcp or tls", ""),
        _out("scheme", str, "URL scheme", ""),
        _out("hostport", str, "host:port", ""),
        _out("host", str, "host name", ""),
        _out("port", int, "port", 0),
        Field("type", Literal["cloud"], "ephemeral (an agent's), edge or cloud; only cloud "
              "endpoints are created", create="optional", immutable=True, default="cloud"),
        Field("metadata", str, "metadata", update=True, default="", max_bytes=4096),
        Field("description", str, "description", update=True, default="", max_bytes=255),
        _out("domain", Ref | None, "reserved domain served"),
        _out("tcp_addr", Ref | None, "reserved address served"),
        # (a TCP cloud endpoint's reserved address, set when its URL is claimed: shown as
        # tcp_addr; the address cannot be deleted while the endpoint serves it)
        Field("tcp_addr_id", str | None, "the reserved address a TCP cloud endpoint serves",
              create="no", response=False, refs=lambda _v: [],
              link=Link(("reserved_addrs",), "restrict", render_as="tcp_addr", code=7105)),
        _out("tunnel", Ref | None, "tunnel behind the endpoint"),
        _out("edge", Ref | None, "edge behind the endpoint"),
        _out("upstream_url", str, "where traffic is forwarded", ""),
        _out("upstream_protocol", str, "protocol towards the upstream", ""),
        Field("url", str, "the endpoint URL; a cloud endpoint's is https:// or http:// and a "
              "reserved domain (or a name under a reserved wildcard domain), or an internal "
              "name (api.internal); tls:// and a reserved domain; or tcp:// and a reserved "
              "address (host:port)",
              create="required",
              update=True, check=_url),
        _out("principal", Ref | None, "identity that created the endpoint"),
        Field("traffic_policy", str, "the traffic policy document (JSON or YAML) of a cloud "
              "endpoint", create="required", update=True, check=_policy, max_bytes=1 << 20),
        Field("bindings", list[Literal["public", "internal"]], "where the endpoint is "
              "reachable: public, or internal (a .internal URL, reached only through "
              "forward-internal)", update=True, default=lambda: ["public"]),
        _out("tunnel_session", Ref | None, "session of the tunnel"),
        _out("name", str, "name", ""),
        Field("pooling_enabled", bool, "whether the URL is shared by several endpoints: cloud "
              "endpoints of one URL that all set it take its traffic in turn", update=True,
              default=False),
    ),
)

KINDS = (TUNNEL_SESSIONS, TUNNELS, ENDPOINTS)
